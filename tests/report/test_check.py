"""``agentflow report`` checks a report file against the shipped schema before drawing it.

It checked only that three sections were objects: a report whose ``fleet.retries`` was
``null``, or whose ``context.by_turn`` was a string, was drawn until a figure met it — a
TypeError or ValueError traceback (21 such places). A file that fails the schema is now
one ``ConfigError`` line naming the JSON path; rows of ``agents`` and ``samples`` need
only be objects (their fields are read one by one)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agentflow._errors import ConfigError
from agentflow.report import make_figures
from agentflow.report._runs import Run, check_report, load_run
from tests.report.runs import virtual_report


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """A valid report of six agents, with kept turns, tools and a server section."""
    return virtual_report(6, seed=1, label="base")


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [  # each was a traceback from the figure that read it
        (("fleet", "retries"), None, "$.fleet.retries"),
        (("fleet", "retries"), "x", "$.fleet.retries"),
        (("context", "by_turn"), "x", "$.context.by_turn"),
        (("distributions", "ttft_s", "cdf", 0), None, "$.distributions.ttft_s.cdf[0]"),
        (("distributions", "ttft_s", "count"), "x", "$.distributions.ttft_s.count"),
        (("throughput", "t_s"), "x", "$.throughput.t_s"),
        (("throughput", "bucket_s"), "x", "$.throughput.bucket_s"),
        (("provenance", "output_tokens", "server_usage", "turns"), None, "$.provenance"),
        (("server", "comparison"), "x", "$.server.comparison"),
        (("server", "latency", "ttft_s", "count"), "x", "$.server.latency.ttft_s.count"),
        (("agents", 2), "x", "$.agents[2]"),
        (("samples", 0), None, "$.samples[0]"),
    ],
)
def test_a_malformed_report_is_one_line_naming_the_path(
    report: dict[str, Any], tmp_path: Path, path: tuple[Any, ...], value: Any, where: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_set(report, path, value)))
    with pytest.raises(ConfigError) as info:
        make_figures([load_run(bad)])
    text = str(info.value)
    assert text.startswith(f"{bad}: {where}") and "\n" not in text and len(text) < 400


def test_the_rows_fields_are_read_one_by_one(report: dict[str, Any]) -> None:
    """Rows of ``agents`` and ``samples`` are checked to be objects only (checking each
    against the schema costs more than drawing them: ~8 s for 3,000 sessions and 12,000
    turns); a field of the wrong type in one is left out of the figures, not a crash."""
    odd = _set(report, ("agents", 1, "decode_tps"), "x")
    odd = _set(odd, ("samples", 0, "ready_ns"), "x")
    odd = _set(odd, ("samples", 1, "prompt_tokens"), "x")
    figures = make_figures([Run("odd", check_report(odd, "odd"))])
    assert {f.key for f in figures} >= {"decode_tps", "session_timeline", "lengths"}


def test_a_valid_report_passes_whole(report: dict[str, Any]) -> None:
    assert check_report(report, "base") is report
