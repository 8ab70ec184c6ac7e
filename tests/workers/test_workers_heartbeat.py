"""A worker that is alive but hung (its event loop blocked by a tool that does not
return) against the HTTP simulator on loopback: the parent's heartbeat watchdog kills it;
without a store its sessions fail with a WorkerError naming the missed heartbeat while the
other worker's complete; with a store they continue on a new worker. One hung before it
reads a large start message is bounded too, and a cancel then does not block the loop.
No worker process is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow import ConfigError, Event, Fleet, HTTPTransport, WorkerError
from agentflow._workers import _watchdog
from agentflow.store import SQLiteStore
from tests.sched.conftest import RecordingSim
from tests.wait import GUARD_S
from tests.workers.hang_tools import ONCE, hang_workload
from tests.workers.slow_import import HANG_IMPORT, SLOW
from tests.workers.test_workers import gone, workers_now
from tests.workers.tools import PLAIN

#: Small, so the test ends soon after the worker blocks; the block is 600 s, so only the
#: watchdog can end it.
HEARTBEAT_S = 2.0


class Pids:
    """The worker pids seen while events arrive."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def __call__(self, event: Event) -> None:
        self.seen |= workers_now()


async def test_a_hung_worker_is_killed_and_its_sessions_fail_naming_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker 1's tool blocks its loop for 600 s: the watchdog kills it; its sessions fail
    with a WorkerError naming the missed heartbeat, worker 0's all complete, the run
    returns and neither worker is left."""
    monkeypatch.delenv(ONCE, raising=False)
    pids = Pids()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(
            http,
            max_concurrency=4,
            workers=2,
            heartbeat_timeout_s=HEARTBEAT_S,
            callbacks=[pids],
        )
        result = await fleet.run(hang_workload(12))
    by_id = {s.session_id: s for s in result.sessions}
    for k in range(0, 12, 2):  # worker 0's: all completed
        assert by_id[f"s{k}"].ok, by_id[f"s{k}"].error
    failed = [by_id[f"s{k}"] for k in range(1, 12, 2)]  # worker 1's: it hung on the first
    for s in failed:
        assert s.status == "error"
        assert isinstance(s.error, WorkerError)
        assert s.error.worker == 1
        assert s.error.exitcode == -signal.SIGKILL
        # The heartbeat leads, then the exit code, the session and why it was hung.
        assert re.fullmatch(
            rf"worker 1 \(pid \d+\) sent no heartbeat for {HEARTBEAT_S:g} s and was killed "
            rf"\(exit code {-signal.SIGKILL}\) before session '{s.session_id}' ended: "
            r"its event loop was blocked \(a call that does not return, or a deadlock\)",
            str(s.error),
        ), str(s.error)
    assert len(pids.seen) == 2
    assert not workers_now()
    assert all(gone(pid) for pid in pids.seen)


async def test_with_a_store_a_hung_worker_s_sessions_continue_on_a_new_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool blocks only the first time: the killed worker's sessions continue on a
    new worker and the run ends as one process's does (the same transcripts)."""
    marker = tmp_path / "stalled"
    monkeypatch.setenv(ONCE, str(marker))  # the spawned workers inherit it
    marker.write_text("")  # first, one process (nothing blocks): the transcripts to match
    async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
        one = await Fleet(http, max_concurrency=4).run(hang_workload(12))
    assert not one.failed
    marker.unlink()
    pids = Pids()
    store = SQLiteStore(tmp_path / "run.db")
    try:
        async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(
                http,
                max_concurrency=4,
                workers=2,
                store=store,
                heartbeat_timeout_s=HEARTBEAT_S,
                callbacks=[pids],
            )
            result = await fleet.run(hang_workload(12), run_id="hb")
        assert await store.conflicts("hb") == []
    finally:
        await store.aclose()
    assert marker.exists(), "no session's tool blocked"
    hung = int(marker.read_text())
    assert not result.failed, [s.error for s in result.failed]
    for a, b in zip(one.sessions, result.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
    # The hung worker, and the new worker that continued its sessions.
    assert hung in pids.seen
    assert len(pids.seen) == 3
    assert not workers_now()
    assert all(gone(pid) for pid in pids.seen)


@pytest.mark.parametrize(
    "bad",
    [0, -1.0, 0.5, float("nan"), float("inf"), 2e9, 10**400, True, "60"],
    ids=lambda bad: repr(bad)[:8],
)
def test_a_bad_heartbeat_timeout_is_a_config_error_naming_it(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"heartbeat_timeout_s .* got " + re.escape(repr(bad))):
        Fleet(HTTPTransport("http://127.0.0.1:1"), workers=2, heartbeat_timeout_s=bad)  # type: ignore[arg-type]


def test_the_heartbeat_defaults_to_a_minute_and_none_disables_it() -> None:
    http = HTTPTransport("http://127.0.0.1:1")
    assert Fleet(http, workers=2).heartbeat_timeout_s == 60.0
    assert Fleet(http, workers=2, heartbeat_timeout_s=None).heartbeat_timeout_s is None


async def test_a_worker_hung_in_its_start_up_is_killed_after_the_start_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker 1's sessions import a module that hangs in a worker: it never sends a
    message; the heartbeat leaves it alone while it starts, and the start-up bound
    (shortened here) kills it: its sessions fail saying so, worker 0's complete."""
    monkeypatch.setattr(_watchdog, "START_TIMEOUT_S", 8.0)
    monkeypatch.setenv(HANG_IMPORT, "1")  # the spawned workers inherit it
    sessions = [
        (PLAIN if k % 2 == 0 else SLOW).session(f"question {k}", session_id=f"s{k}")
        for k in range(6)
    ]
    pids = Pids()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(
            http, max_concurrency=4, workers=2, heartbeat_timeout_s=HEARTBEAT_S, callbacks=[pids]
        )
        result = await fleet.run(sessions)
    by_id = {s.session_id: s for s in result.sessions}
    assert all(by_id[f"s{k}"].ok for k in (0, 2, 4))
    for k in (1, 3, 5):
        error = by_id[f"s{k}"].error
        assert isinstance(error, WorkerError)
        assert error.worker == 1
        assert re.fullmatch(
            r"worker 1 \(pid \d+\) sent nothing within 8 s of its start and was killed "
            rf"\(exit code {-signal.SIGKILL}\) before session 's{k}' ended: "
            r"it hung while it loaded its sessions or tools",
            str(error),
        ), str(error)
    assert not workers_now()
    assert all(gone(pid) for pid in pids.seen)


async def test_a_cancel_kills_a_worker_that_does_not_stop_in_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Worker 1's loop is blocked when the run is cancelled: it cannot answer, so once
    stop_timeout_s has passed it is killed, not waited for again at the reap (one by one,
    that was twice the timeout per worker); worker 0 stops by itself and is not killed.
    No worker is left."""
    import asyncio

    from agentflow._workers import _processes
    from agentflow._workers._broker import WorkerHandle

    marker = tmp_path / "stalled"  # written by the stalling tool as it blocks
    monkeypatch.setenv(ONCE, str(marker))
    killed: list[int] = []
    real_kill = _processes.ProcessLauncher.kill

    def kill(self: _processes.ProcessLauncher, w: WorkerHandle) -> None:
        killed.append(w.index)
        real_kill(self, w)

    monkeypatch.setattr(_processes.ProcessLauncher, "kill", kill)
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=4, workers=2, stop_timeout_s=1.0,
                      heartbeat_timeout_s=None)  # fmt: skip
        task = asyncio.ensure_future(fleet.run(hang_workload(4)))
        async with asyncio.timeout(60):
            while not marker.exists():  # noqa: ASYNC110 - another process writes it
                await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert killed == [1]
    assert not workers_now()


async def start_hang(mode: str, markers: Path) -> dict[str, Any]:
    """Run ``tests.workers.start_hang_child`` (its workers hang before they read a start
    message larger than the pipe's buffer) in ``mode``; its JSON line. The child, and
    its workers (hung before they arm their death signal), are killed as a process
    group should it hang — and at the end in any case."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.workers.start_hang_child",
        mode,
        "http://127.0.0.1:9",  # never reached: no session starts
        str(markers),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GUARD_S)
    except TimeoutError:
        raise AssertionError(f"{mode}: the parent hung on its workers' start") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == 0
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert len(os.listdir(markers)) == 2  # both workers hung in their import
    return result


async def test_a_worker_hung_before_it_reads_a_large_start_is_killed(tmp_path: Path) -> None:
    """A worker that hangs before it reads its start message (larger than the pipe's
    buffer: the parent's send of it blocks) is still bounded by the start-up timeout:
    the watchdog kills it and its sessions fail saying so (the bound counted only once
    that send had returned, so the run waited for the worker forever)."""
    result = await start_hang("watchdog", tmp_path)
    for k, (status, error) in enumerate(result["sessions"]):
        assert status == "error"
        assert re.fullmatch(
            rf"worker {k} \(pid \d+\) sent nothing within 2 s of its start and was killed "
            rf"\(exit code {-signal.SIGKILL}\) before session 's{k}' ended: "
            r"it hung while it loaded its sessions or tools",
            error,
        ), error
    assert result["workers"] == 0


async def test_a_cancel_while_a_start_send_is_blocked_does_not_block_the_loop(
    tmp_path: Path,
) -> None:
    """Cancelled while both workers' start sends are blocked (no heartbeat): the cancel
    and the reap's exit wait behind them instead of blocking the event loop in a send
    to a full pipe; the workers are killed and the sessions end cancelled."""
    result = await start_hang("cancel", tmp_path)
    assert result == {"sessions": [["cancelled", ""], ["cancelled", ""]], "workers": 0}
