"""The live view of a resumed demo run counts the sessions that ended in earlier attempts
as done: they are not run again and send no event, so its sessions bar (of all the run's
sessions) ended short of 100% — "sessions 9/16" — at the end of a run whose every
session had completed."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agentflow._events import Event
from agentflow.cli import main
from agentflow.demo import run as demo_run
from agentflow.demo._stop import Stopper
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.report import LiveView
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.stats import RunJournal
from agentflow.store import SQLiteStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

AGENTS = 6
DEMO = [
    "--agents",
    str(AGENTS),
    "--max-concurrency",
    "2",
    "--turns",
    "2:3",
    "--max-tokens",
    "16",
    "--virtual",
    "--no-live",
]


class _StopAtSecondEnd(RunJournal):
    """The demo's journal, raising SIGINT in this process once 2 sessions ended."""

    event_types = RunJournal.event_types | {"session_end"}
    ended = 0

    def __call__(self, event: Event) -> None:
        super().__call__(event)
        if event.type == "session_end":
            self.ended += 1
            if self.ended == 2:
                signal.raise_signal(signal.SIGINT)


def test_a_resumed_runs_live_view_ends_with_every_session_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, first = tmp_path / "runs.db", tmp_path / "1.json"
    with monkeypatch.context() as patch:
        patch.setattr(demo_run, "RunJournal", _StopAtSecondEnd)
        argv = ["demo", *DEMO, "--store", str(db), "--report", str(first)]
        assert main(argv) == 130
    stopped = json.loads(first.read_text())["run"]
    assert 2 <= stopped["interrupted"]["sessions_ended"] < AGENTS
    run_id = stopped["run_id"]

    async def recorded() -> dict[str, Any] | None:
        async with SQLiteStore(db, journal=False) as store:
            return (await store.load(run_id)).config

    config = demo_run.resume_config(asyncio.run(recorded()), run_id, store=db, live=False)
    view = LiveView(total_sessions=AGENTS, console=Console(file=io.StringIO()))

    async def resume() -> int:
        transport = SimTransport(EngineDriver(Engine(config.profile, seed=config.seed)))
        try:
            result = await demo_run._run_fleet(
                config, transport, view, Stopper(), loop_clock, journal=RunJournal(loop_clock)
            )
        finally:
            await transport.aclose()
        return sum(s.status == "completed" for s in result.sessions)

    completed = run_virtual(resume())
    assert completed == AGENTS
    assert view.done == AGENTS  # the bar at 100%, as the summary's "6/6 completed"
    assert view.failed == 0
