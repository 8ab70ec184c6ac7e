"""On a VirtualTimeLoop, an await on the store's writer thread is thread work: the clock
does not jump to the next timer while the thread works (it used to, so a resumed run
whose only other timer was the gc refreezer's 1 s tick reported minutes of run time)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from agentflow.embedded import run_virtual
from agentflow.store import SQLiteStore

from .fleets import agents, resume, run_cut


def test_store_call_keeps_virtual_time_still(tmp_path: Path) -> None:
    """A store call whose thread work takes real time, with only a 60 s timer on the
    loop: the call's answer comes at the same virtual time it was asked at."""
    store = SQLiteStore(tmp_path / "runs.db")
    done = threading.Event()

    def slow(_: object) -> str:
        # Ends by a real-time timer, never by the loop: the loop must wait for it.
        done.wait(30)
        return "answered"

    async def main() -> tuple[str, float, bool]:
        loop = asyncio.get_running_loop()
        await store.open()
        ticked = asyncio.Event()
        loop.call_later(60, ticked.set)
        timer = threading.Timer(0.05, done.set)
        timer.start()
        try:
            t0 = loop.time()
            answer = await store._call(slow)
            elapsed = loop.time() - t0
        finally:
            timer.cancel()
            await store.aclose()
        return answer, elapsed, ticked.is_set()

    answer, elapsed, ticked = run_virtual(main())
    assert answer == "answered"
    assert elapsed == 0.0 and not ticked


def test_resumed_run_time_is_that_of_its_turns(tmp_path: Path) -> None:
    """A run cut after 5 turns and resumed on virtual time: the resumed attempt's run
    time is under a second of virtual time, as the uninterrupted run's is — not one
    second per pass of the loop while the resume's claims and reads were out."""
    path = tmp_path / "runs.db"
    whole = run_virtual(run_cut(tmp_path / "whole.db", agents(), 6, None))
    assert whole is not None and whole.wall_s < 1.0
    assert run_virtual(run_cut(path, agents(), 6, 5)) is None
    resumed = run_virtual(resume(path, agents()))
    assert resumed.wall_s < 1.0
