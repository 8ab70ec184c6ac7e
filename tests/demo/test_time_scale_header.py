"""A server's ``x-agentflow-time-scale`` header that is no finite number > 0 is not a time
scale: ``nan``, ``inf`` or ``1e400`` made the demo's report no plain JSON (NaN/Infinity,
which ``agentflow report`` refuses) and ``agentflow report --store`` of the run ended in a
traceback; a negative one scaled every time by nonsense."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, Fleet, FleetResult
from agentflow.bench._cli_output import write_bench_report as _write_report
from agentflow.demo.run import _write_json
from agentflow.demo.summary import advertised_time_scale
from agentflow.embedded import loop_clock, run_virtual
from agentflow.report._runs import load_run
from agentflow.store import SQLiteStore, export_report
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest
from tests.report.test_cli import _run
from tests.stats.test_report_schema import validate

DEMO = {"kind": "agentflow-demo", "demo": {"time_scale": 1}}


def _stored_run(db: Path, header: str) -> tuple[FleetResult, dict[str, Any]]:
    def reply(request: ChatRequest) -> Reply:
        return dataclasses.replace(Reply.text("hi"), headers={"x-agentflow-time-scale": header})

    async def main() -> tuple[FleetResult, dict[str, Any]]:
        async with SQLiteStore(db) as store:
            fleet = Fleet(MockTransport(reply, clock=loop_clock), clock=loop_clock, store=store)
            session = Agent(name="a", model="m").session("hi", session_id="s0")
            result = await fleet.run([session], run_config=DEMO, run_id="r1")
            return result, await export_report(store, "r1")

    return run_virtual(main())


@pytest.mark.parametrize("header", ["nan", "inf", "-inf", "1e400", "-2", "0"])
def test_a_bad_header_is_no_time_scale(tmp_path: Path, header: str) -> None:
    result, stored = _stored_run(tmp_path / "runs.db", header)
    assert result.sessions[0].turns[0].trace.response_headers["x-agentflow-time-scale"] == header
    assert advertised_time_scale(result) is None
    validate(stored)
    assert stored["run"]["time_scale"] == 1.0  # the simulator's own scale, as configured
    out = tmp_path / "stored.json"
    assert _run("--store", str(tmp_path / "runs.db"), "r1", "--json", str(out)) == 0
    assert load_run(out).report["run"]["time_scale"] == 1.0


def test_a_good_header_is_the_time_scale(tmp_path: Path) -> None:
    result, stored = _stored_run(tmp_path / "runs.db", "2.5")
    assert advertised_time_scale(result) == 2.5
    assert stored["run"]["time_scale"] == 2.5


def _demo_write(path: Path, data: dict[str, Any]) -> None:
    _write_json(path, data)


def _bench_write(path: Path, data: dict[str, Any]) -> None:
    _write_report(data, path)


@pytest.mark.parametrize("write", [_demo_write, _bench_write])
def test_reports_are_written_as_plain_json(
    tmp_path: Path, write: Callable[[Path, dict[str, Any]], None]
) -> None:
    """The demo's and the bench's report writers refuse a NaN rather than write a file
    that ``agentflow report`` cannot read."""
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match="JSON compliant"):
        write(path, {"run": {"time_scale": math.inf}})
    assert not path.exists()
    write(path, {"a": 1.5})
    assert json.loads(path.read_text()) == {"a": 1.5}
