"""What a worker sends that the parent cannot take as it is: a message that does not load
here (its worker is stopped and its sessions fail saying why), a result read after a
cancel gave its worker up (dropped: a session ends once), and the exit code a worker's
sessions are failed with once its pipe has ended."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentflow import Event, Fleet, HTTPTransport, Session, WorkerError
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._processes import ProcessLauncher
from agentflow.store import SQLiteStore
from tests.sched.conftest import RecordingSim, peak_overlap
from tests.wait import GUARD_S
from tests.workers.test_workers import intervals, workers_now
from tests.workers.tools import PLAIN, TOOL
from tests.workers.wire_tools import HELD, RELEASE, Gated, Unreadable


def with_metadata(n: int, first: dict[str, Any]) -> list[Session]:
    """``n`` sessions as :func:`~tests.workers.tools.workload` deals them, the first
    (on worker 0) with ``first`` as its metadata."""
    agents = (PLAIN, TOOL)
    return [
        agents[i % 2].session(
            f"question {i}", session_id=f"s{i}", metadata=first if i == 0 else None
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("recorded", [False, True], ids=["no-store", "store"])
async def test_a_message_the_parent_cannot_read_stops_its_worker_and_says_why(
    tmp_path: Path, recorded: bool
) -> None:
    """Session s0's result (on worker 0) does not load in the parent: a ValueError, which
    was taken for a closed pipe — the worker ran on while its slots were handed out again
    (and, with a store, its sessions re-run elsewhere at the same time), and they failed
    with "exit code None" and no reason. Now the worker is killed, its unfinished sessions
    fail with a WorkerError that says why (not re-run: the message would fail again), and
    worker 1's all complete."""
    store = SQLiteStore(tmp_path / "run.db") if recorded else None
    try:
        async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=store)
            result = await fleet.run(with_metadata(12, {"x": Unreadable()}))
    finally:
        if store is not None:
            await store.aclose()
    by_id = {s.session_id: s for s in result.sessions}
    assert all(by_id[f"s{k}"].ok for k in range(1, 12, 2))  # worker 1's
    assert not by_id["s0"].ok
    for s in result.failed:
        assert isinstance(s.error, WorkerError), s.error
        assert s.error.worker == 0
        assert s.error.exitcode == -signal.SIGKILL
        assert str(s.error).endswith(
            f"before session {s.session_id!r} did: sent a message the parent could not "
            "read: ValueError('this object cannot be rebuilt in the parent')"
        ), str(s.error)
    assert peak_overlap(intervals(sim.records)) <= 2
    assert not workers_now()


class _Exiting:
    """A worker process whose pipe has ended but which the kernel has not reaped yet (a
    moment that cannot be held open in a real one): its exit code is known once it is
    joined."""

    pid = 4242
    exitcode: int | None = None

    def join(self, timeout: float | None = None) -> None:
        self.exitcode = -signal.SIGKILL

    def kill(self) -> None:
        raise AssertionError("a worker whose pipe ended is not killed")


async def test_a_worker_s_sessions_fail_with_its_exit_code_once_its_pipe_ended() -> None:
    """The reader found the pipe's end and reported the worker gone at once, so its
    sessions' WorkerError could say "exit code None" (the race that it now waits out,
    bounded, by joining the process first)."""
    mine, theirs = multiprocessing.Pipe()
    w = WorkerHandle(0, [], send=mine.send, process=_Exiting(), conn=mine)
    launcher = ProcessLauncher()
    ended: asyncio.Future[tuple[str, bool]] = asyncio.get_running_loop().create_future()

    def on_exit(w: WorkerHandle, lost: bool) -> None:
        ended.set_result((launcher.ended(w)[0], lost))

    launcher.listen(w, lambda w, msg: None, on_exit)
    theirs.close()
    assert await asyncio.wait_for(ended, 60) == ("worker 0 (pid 4242) ended (exit code -9)", True)
    assert w.reader is not None
    w.reader.join(60)
    mine.close()


async def test_a_result_read_after_a_cancel_gave_its_worker_up_is_dropped() -> None:
    """Worker 0's reader is held loading s0's result (its metadata) when the run is
    cancelled: after stop_timeout_s the worker is given up and s0 ends cancelled here.
    That result, read once the run has returned, used to be emitted too — a second
    session_end, and session.result changed after run() returned. Now it is dropped."""
    RELEASE.clear()
    HELD.clear()
    ends: Counter[str] = Counter()
    s1_ended = asyncio.Event()

    def on_end(event: Event) -> None:
        if event.type == "session_end":
            ends[event.session_id] += 1
            if event.session_id == "s1":
                s1_ended.set()

    sessions = [
        PLAIN.session("question 0", session_id="s0", metadata={"g": Gated()}),
        PLAIN.session("question 1", session_id="s1"),
    ]
    loop = asyncio.get_running_loop()
    try:
        async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, workers=2, stop_timeout_s=0.5, callbacks=[on_end])
            task = asyncio.create_task(fleet.run(sessions))
            assert await loop.run_in_executor(None, HELD.wait, 60)
            # s1 (worker 1) ends first, by its event, not by how fast it happens to run:
            # the cancel is to find only s0's result still on its way.
            await asyncio.wait_for(s1_ended.wait(), 60)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            cancelled = sessions[0].result
            assert cancelled is not None and cancelled.status == "cancelled"
            assert ends == {"s0": 1, "s1": 1}
            readers = [t for t in threading.enumerate() if t.name == "agentflow-worker-0-reader"]
            assert len(readers) == 1
            RELEASE.set()  # s0's real result is read now, then its pipe's end
            for reader in readers:  # each hands its message to this loop before it ends
                await loop.run_in_executor(None, reader.join, 60)
                assert not reader.is_alive()
    finally:
        RELEASE.set()
    assert ends == {"s0": 1, "s1": 1}
    assert sessions[0].result is cancelled
    assert sessions[1].result is not None and sessions[1].result.ok
    assert not workers_now()


def test_a_worker_s_reader_ends_quietly_when_its_run_closes_the_channel() -> None:
    """At a worker's end its channel is closed while the reader thread may be inside
    ``conn.recv()`` (then a TypeError: the handle was closed under it) or about to call
    it (an OSError): either way the reader ends with no exception ("Exception in thread
    … _read_worker_side" at exit) and without taking the parent for gone."""
    from agentflow._workers._worker import _read_worker_side

    errors: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    parent, child = multiprocessing.Pipe()
    loop = asyncio.new_event_loop()
    gone: list[bool] = []
    closing = threading.Event()
    try:
        reader = threading.Thread(
            target=_read_worker_side,
            args=(child, loop, lambda msg: None, lambda: gone.append(True), closing),
            daemon=True,
        )
        reader.start()
        closing.set()  # what worker_entry does at the run's end, then:
        child.close()
        with contextlib.suppress(OSError):
            parent.send(("exit",))  # wakes a recv that was under way
        reader.join(GUARD_S)
        assert not reader.is_alive()
    finally:
        threading.excepthook = previous
        parent.close()
        loop.close()
    assert errors == []
    assert gone == []
