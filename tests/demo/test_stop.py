"""The demo's signal handling in-process (agentflow/demo/_stop.py), on virtual time.

A real SIGINT is raised in this process while a fleet runs on the embedded simulator;
the run stops with every session in its result, and the process's own handlers are
where they were afterwards.
"""

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

from agentflow import Agent, Fleet, FleetResult, SessionEndEvent
from agentflow._cli_demo import _demo_status
from agentflow._events import Event
from agentflow.demo import run as demo_run
from agentflow.demo._config import DemoConfig
from agentflow.demo._stop import Stopper, run_stoppable
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.typing import Callback

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SESSIONS = 40


def stop_after(ended: int, sig: signal.Signals) -> Callback:
    """A callback that raises ``sig`` in this process once ``ended`` sessions ended."""
    seen = [0]

    def callback(event: Event) -> None:
        if isinstance(event, SessionEndEvent):
            seen[0] += 1
            if seen[0] == ended:
                signal.raise_signal(sig)

    return callback


def run_fleet(stopper: Stopper, callback: Callback) -> FleetResult:
    agent = Agent(name="coder", model="sim", instructions="Shared prefix. " * 50)
    engine = Engine("cpu-tiny", seed=3, textgen=TextGenConfig(tool_rounds=0, answer_tokens=(8, 8)))

    async def main() -> FleetResult:
        transport = SimTransport(EngineDriver(engine))
        fleet = Fleet(transport, max_concurrency=2, clock=loop_clock, callbacks=[callback])
        sessions = [agent.session(f"task {i}") for i in range(SESSIONS)]
        try:
            return await run_stoppable(fleet, sessions, stopper, loop_clock)
        finally:
            await transport.aclose()

    with stopper.guarding():
        return run_virtual(main())


def test_the_first_signal_returns_every_session_with_what_it_finished() -> None:
    before = signal.getsignal(signal.SIGINT)
    stopper = Stopper()
    result = run_fleet(stopper, stop_after(3, signal.SIGINT))
    assert stopper.signal is signal.SIGINT
    assert len(result.sessions) == SESSIONS
    statuses = [s.status for s in result.sessions]
    assert statuses.count("completed") >= 3
    assert statuses.count("cancelled") >= 1
    assert set(statuses) == {"completed", "cancelled"}
    for s in result.sessions:
        if s.status == "completed":
            assert len(s.turns) == 1 and s.turns[0].metrics.output_tokens > 0
        else:
            assert s.final_output is None
    # Two at a time: some cancelled sessions never started (synthesized, no turns).
    assert sum(not s.turns for s in result.sessions if s.status == "cancelled") >= 1
    assert result.peak_in_flight == 2
    assert result.wall_s > 0
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_handlers_are_restored_and_a_run_without_signal_is_untouched() -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    stopper = Stopper()
    result = run_fleet(stopper, lambda event: None)
    assert stopper.signal is None
    assert [s.status for s in result.sessions] == ["completed"] * SESSIONS
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_after_the_first_signal_a_second_one_is_forced_until_the_guard_ends() -> None:
    """Between the stopped run and the end of the demo (report, child), the handler is
    the one that exits at once; it is not called here, only checked."""
    before = signal.getsignal(signal.SIGTERM)
    stopper = Stopper()
    seen: list[object] = []

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.sleep(3600))
        with stopper.armed(task, lambda: seen.append("snapshot")):
            signal.raise_signal(signal.SIGTERM)
            with pytest.raises(asyncio.CancelledError):
                await task
        seen.append(signal.getsignal(signal.SIGTERM))

    with stopper.guarding():
        asyncio.run(main())
    assert stopper.signal is signal.SIGTERM
    assert seen == ["snapshot", stopper._force]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_after_the_run_is_noted_and_the_next_one_would_exit() -> None:
    """After a run that no signal stopped, the first signal (while the report is built)
    cuts nothing short: it is only noted; the one after it would exit at once."""
    before = signal.getsignal(signal.SIGINT)
    stopper = Stopper()

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.sleep(0))
        with stopper.armed(task, lambda: None):
            await task

    forced: list[int] = []
    with stopper.guarding():
        asyncio.run(main())
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: noted
        assert (stopper.signal, stopper.after_run) == (signal.SIGINT, True)
        assert forced == []
        # The next one: _force (which would exit the process; here it only says so).
        stopper._force = lambda signum, frame: forced.append(signum)  # type: ignore[method-assign]
        signal.raise_signal(signal.SIGINT)
        assert forced == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("during", ["build_report", "summary_table"])
def test_a_signal_after_the_demos_run_still_writes_its_whole_report(
    during: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agentflow demo`` interrupted once its fleet has ended — while the report is built,
    or its summary printed (after the file is written): the report of the whole run is
    written, marked ``interrupted`` with ``after_run``, and the command's status is 130
    (it used to exit 130 with no report)."""
    real = getattr(demo_run, during)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(demo_run, during, interrupted)
    path = tmp_path / "run.json"
    config = DemoConfig(agents=4, turns=(2, 3), virtual=True, live=False, report=path)
    report = demo_run.run_demo(config, console=Console(file=io.StringIO()))
    mark = {"signal": "SIGINT", "sessions_ended": 4, "sessions_cancelled": 0, "after_run": True}
    assert report["run"]["interrupted"] == mark
    written = json.loads(path.read_text())
    assert written["run"]["interrupted"] == mark
    assert written["fleet"]["statuses"]["completed"] == 4 == written["fleet"]["sessions"]
    assert _demo_status(report) == 130


def _demo(path: Path, console: Console) -> dict[str, Any]:
    config = DemoConfig(agents=4, turns=(2, 3), virtual=True, live=False, report=path)
    return demo_run.run_demo(config, console=console)


def test_a_signal_while_the_report_is_written_is_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that comes as the report is written (here: just after the file is in
    place) gets the file written again, marked, so that the file and the status agree
    (it used to leave the file unmarked and exit 130)."""
    real = demo_run._write_json
    marks: list[Any] = []

    def write(path: Path, data: dict[str, Any]) -> None:
        real(path, data)
        marks.append(data["run"].get("interrupted"))
        if len(marks) == 1:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(demo_run, "_write_json", write)
    path = tmp_path / "run.json"
    report = _demo(path, Console(file=io.StringIO()))
    assert marks[0] is None and len(marks) == 2
    assert marks[1]["after_run"] is True and marks[1]["signal"] == "SIGINT"
    assert json.loads(path.read_text())["run"]["interrupted"] == marks[1]
    assert _demo_status(report) == 130


def test_a_signal_once_the_report_is_written_changes_nothing(tmp_path: Path) -> None:
    """Once the file is written the run is over: a signal then (here, as "report written"
    is printed) is noted on stderr, and neither the file nor the status changes."""

    class _Out(io.StringIO):
        def write(self, text: str) -> int:
            if "report written" in text:
                signal.raise_signal(signal.SIGINT)
            return super().write(text)

    path = tmp_path / "run.json"
    report = _demo(path, Console(file=_Out()))
    assert "interrupted" not in report["run"]
    assert "interrupted" not in json.loads(path.read_text())["run"]
    assert _demo_status(report) == 0
