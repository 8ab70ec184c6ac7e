"""Every place that states the TPOT / decode-speed formula says what the code does: the
tokens are the streamed ones, hidden reasoning tokens left out (``TurnMetrics.decode_tokens``).
docs/report-schema.md (``agents[].decode_tps``), the ``TurnMetrics`` docstring, the
Prometheus HELP text and docs/bench.md said "output tokens − 1". And the report's ``server``
section is part of ``agentflow.report/2`` (its schema defines it), no "proposed addition"."""

from __future__ import annotations

import re
from pathlib import Path

from agentflow import TurnMetrics
from agentflow.report import server_section_schema
from agentflow.stats import report_schema
from agentflow.stats._prometheus import _HELP

DOCS = Path(__file__).parents[2] / "docs"

#: "(output tokens − 1)" and its spellings, not preceded by the hidden reasoning tokens.
_BARE = re.compile(r"output[ _]tokens\s*[−-]\s*1\b")


def _bare_formulas(text: str) -> list[str]:
    return [text[max(0, m.start() - 60) : m.end()] for m in _BARE.finditer(text)]


def test_every_decode_formula_leaves_hidden_reasoning_tokens_out() -> None:
    places = {p.name: p.read_text() for p in DOCS.glob("*.md")}
    places["TurnMetrics"] = TurnMetrics.__doc__ or ""
    places["Prometheus HELP"] = "\n".join(_HELP.values())
    bare = {name: hits for name, text in places.items() if (hits := _bare_formulas(text))}
    assert bare == {}
    assert "hidden reasoning" in (TurnMetrics.__doc__ or "")
    assert "hidden reasoning" in _HELP["time_per_output_token_seconds"]
    bench = (DOCS / "bench.md").read_text()
    row = next(line for line in bench.splitlines() if line.startswith("| `decode_tps_per_agent`"))
    assert "hidden reasoning" in row


def test_the_server_section_is_part_of_the_report_not_a_proposal() -> None:
    assert "server" in report_schema()["properties"]
    texts = [
        (DOCS / "report-server-section.md").read_text(),
        str(report_schema()["properties"]["server"].get("description")),
        str(server_section_schema().get("description")),
    ]
    assert not [t for t in texts if re.search(r"propos", t, re.I)]
