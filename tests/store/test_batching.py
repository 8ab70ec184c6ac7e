"""How records reach the writer thread without the journal (``journal=False``; with it,
``test_journal.py``): on an event loop the store gathers a batch in a
list and hands it over with one queue put when its interval ends (or when it is full),
so the thread wakes once per batch; records written from a plain thread are queued as
before; either way they are committed in the order they were written. And a recorded
turn is one insert: a session's row gets its ``turns`` and ``sticky_replica`` when it
ends, and a running session's last turn gives its sticky replica on load."""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentflow import Fleet, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import RunEnded, RunStarted, SQLiteStore

from ..wait import GUARD_S, eventually
from .fleets import agents, driver


class CountingQueue:
    """A ``SimpleQueue`` that counts its puts (how often the writer thread is handed
    something)."""

    def __init__(self) -> None:
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.puts: list[Any] = []

    def put(self, item: Any) -> None:
        self.puts.append(item)
        self.q.put(item)

    def get(self, timeout: float | None = None) -> Any:
        return self.q.get(timeout=timeout)

    def get_nowait(self) -> Any:
        return self.q.get_nowait()

    def qsize(self) -> int:
        return self.q.qsize()

    def empty(self) -> bool:
        return self.q.empty()


def _counted(path: Path, **kw: Any) -> tuple[SQLiteStore, CountingQueue]:
    store = SQLiteStore(path, journal=False, **kw)
    counting = CountingQueue()
    store._queue = counting  # type: ignore[assignment]
    return store, counting


def _started(i: int) -> RunStarted:
    return RunStarted(
        run_id=f"r{i}", attempt=0, wall_ns=1_000 + i, clock_ns=0, sessions=0, config=None
    )


def test_a_loop_hands_the_writer_one_batch_per_interval(tmp_path: Path) -> None:
    """Ten records written on the loop: nothing is queued until the batch's timer
    fires; then one put hands over all ten, and one transaction commits them."""

    async def main() -> tuple[int, int, int, int]:
        store, q = _counted(tmp_path / "b.db", batch_interval_s=0.05)
        await store.open()
        opened = len(q.puts)  # the open call
        for i in range(10):
            store.write(_started(i))
        queued_at_once = len(q.puts) - opened
        await eventually(lambda: store.committed == 10, "the batch committed")
        handed = q.puts[opened:]
        await store.aclose()
        return queued_at_once, len(handed), len(handed[0]), store.commits

    assert asyncio.run(main()) == (0, 1, 10, 1)


def test_a_full_batch_is_handed_over_at_once(tmp_path: Path) -> None:
    """With ``max_batch`` 4, writing ten records hands over two full batches at once;
    the last two wait for their interval (10 s here) or, as here, the next flush."""

    async def main() -> tuple[list[int], list[str], int]:
        store, q = _counted(tmp_path / "f.db", batch_interval_s=10, max_batch=4)
        await store.open()
        opened = len(q.puts)
        for i in range(10):
            store.write(_started(i))
        sizes = [len(b) for b in q.puts[opened:]]
        await asyncio.wait_for(store.flush(), GUARD_S)
        runs = sorted(r.run_id for r in await store.runs())
        await store.aclose()
        return sizes, runs, store.committed

    sizes, runs, committed = asyncio.run(main())
    assert sizes == [4, 4]
    assert runs == sorted(f"r{i}" for i in range(10))
    assert committed == 10


@pytest.mark.parametrize("journal", [False, True])
def test_a_write_from_a_plain_thread_comes_after_the_loops_batch(
    tmp_path: Path, journal: bool
) -> None:
    """A run's start written on the loop (still in the loop's batch), then its end
    written from a thread without a loop: the end must not overtake the start — the
    update it makes would find no row, and the run would stay ``running``."""

    async def main() -> str:
        store = SQLiteStore(tmp_path / "t.db", batch_interval_s=10, journal=journal)
        await store.open()
        store.write(_started(0))
        end = RunEnded(run_id="r0", attempt=0, wall_ns=2_000, status="finished")
        await asyncio.to_thread(store.write, end)
        await asyncio.wait_for(store.flush(), GUARD_S)
        (summary,) = await store.runs()
        await store.aclose()
        return summary.status

    assert asyncio.run(main()) == "finished"


def test_a_sessions_row_gets_its_turns_and_replica_when_it_ends(tmp_path: Path) -> None:
    """Turns are inserted without touching the session's row; when the session ends its
    row holds the number of turns and the endpoint of the last one — and a session
    that never ended gets its sticky replica on load from its last recorded turn."""
    path = tmp_path / "s.db"
    team = agents()

    async def main() -> tuple[Any, Any]:
        store = SQLiteStore(path)
        transport = SimTransport(driver())
        try:
            sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i}") for i in range(3)]
            result = await Fleet(transport, clock=loop_clock, store=store).run(sessions)
            # as if s0 had been killed before it ended: its row as it was while it ran
            await store._call(
                lambda c: c.execute(
                    "UPDATE sessions SET status='pending', turns=0, sticky_replica=NULL "
                    "WHERE session_id='s0'"
                )
            )
            return result, await store.load(result.run_id or "")
        finally:
            await store.aclose()
            await transport.aclose()

    result, loaded = run_virtual(main())
    conn = sqlite3.connect(path)
    try:
        rows = {
            sid: (n, sticky)
            for sid, n, sticky in conn.execute(
                "SELECT session_id, turns, sticky_replica FROM sessions"
            )
        }
    finally:
        conn.close()
    for s in result.sessions:
        last = s.turns[-1].trace.endpoint
        if s.session_id != "s0":
            assert rows[s.session_id] == (len(s.turns), last)
    s0 = next(s for s in result.sessions if s.session_id == "s0")
    assert rows["s0"] == (0, None)
    stored = next(s for s in loaded.sessions if s.session_id == "s0")
    assert stored.sticky_replica == s0.turns[-1].trace.endpoint
    assert len(stored.turns) == len(s0.turns)


def test_a_blocked_loop_does_not_hold_its_batch_back(tmp_path: Path) -> None:
    """A record written on the loop, then the loop blocks (a sync call that waits): its
    timer cannot run, so the writer thread takes the batch itself (after ``STALL_S``)
    and commits it while the loop is still blocked."""

    async def main() -> tuple[int, int]:
        store, q = _counted(tmp_path / "k.db", batch_interval_s=0.05)
        await store.open()
        store.write(_started(0))
        committed = threading.Event()

        def watch() -> None:
            while store.committed < 1 and not committed.is_set():
                time.sleep(0.01)
            committed.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        committed.wait(GUARD_S)  # blocks the loop: only the writer can commit it
        seen = store.committed
        committed.set()
        await store.aclose()
        return seen, sum(type(item) is list for item in q.puts)

    assert asyncio.run(main()) == (1, 0)  # committed without the loop handing it over


def test_a_writer_thread_that_fails_fails_every_call_instead_of_hanging(tmp_path: Path) -> None:
    """The writer thread ends on an error of its own (here its idle take raises): the
    calls after it get a StoreError naming it, rather than waiting for a thread that is
    gone."""

    class Broken(SQLiteStore):
        def _take_idle(self) -> Any:
            raise RuntimeError("a bug in the writer")

    async def main() -> None:
        store = Broken(tmp_path / "broken.db", batch_interval_s=0.01)
        await store.open()
        store.write(_started(0))
        thread = store._thread
        assert thread is not None
        await eventually(lambda: not thread.is_alive(), "the writer thread ended")
        with pytest.raises(StoreError, match="writer thread failed: RuntimeError"):
            await asyncio.wait_for(store.flush(), GUARD_S)
        await store.aclose()  # closed already: the failure was said by the flush

    asyncio.run(main())
