"""The run's periodic gc freeze follows real time, not the loop's clock.

On a virtual-time loop the loop's clock can barely move while the CPU works (a
4,000-session simulation: 11 s of CPU in 2.4 virtual seconds); a refreeze timed on loop
time then came ~3 times and full collections came back. Real time is injected here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import AsyncIterator, Iterator

import pytest

import agentflow._gcfreeze as gcfreeze
from agentflow._gcfreeze import Refreezer, frozen_gc
from agentflow.embedded import run_virtual


@pytest.fixture
def freezes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The freeze count after each :func:`freeze_more`, with the gc settings restored."""
    seen: list[int] = []
    real = gcfreeze.freeze_more

    def counting() -> None:
        real()
        seen.append(gc.get_freeze_count())

    monkeypatch.setattr(gcfreeze, "freeze_more", counting)
    threshold = gc.get_threshold()
    try:
        yield seen
    finally:
        gc.set_threshold(*threshold)
        gc.enable()
        gc.unfreeze()


async def _turns(n: int = 3) -> None:
    """Let the loop run what was scheduled (without moving its clock)."""
    for _ in range(n):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def _refreezing(now: list[float], freezes: list[int]) -> AsyncIterator[Refreezer]:
    """A run's frozen collector and its refreezer on the running loop, real time read
    from ``now``; past its first freeze (once the sessions have started)."""
    with frozen_gc():
        refreezer = Refreezer(every_s=1.0, clock=lambda: now[0])
        refreezer.start(asyncio.get_running_loop())
        try:
            await _turns()
            assert len(freezes) == 1
            yield refreezer
        finally:
            refreezer.stop()


def test_a_virtual_loop_is_refrozen_each_real_second(freezes: list[int]) -> None:
    """The loop's clock stands still; each injected real second, the next collection
    brings a freeze of what the run has kept since."""
    now = [100.0]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with _refreezing(now, freezes) as refreezer:
            gc.set_threshold(700, 10, 10)
            gc.collect()  # no full pass is due: only the real-time rule applies
            kept = [[i] for i in range(10_000)]  # what the run keeps meanwhile
            now[0] += 0.5
            gc.collect(0)
            await _turns()
            assert len(freezes) == 1  # not a second yet
            now[0] += 0.6
            gc.collect(0)
            await _turns()
            assert len(freezes) == 2
            assert freezes[1] > freezes[0] + len(kept) // 2
            gc.collect(0)
            await _turns()
            assert len(freezes) == 2  # the next one is a second after this one
            now[0] += 1.0
            gc.collect(0)
            await _turns()
            assert len(freezes) == 3
            refreezer.stop()
            now[0] += 5.0
            gc.collect(0)
            await _turns()
            assert len(freezes) == 3  # stopped: the collector no longer brings any
        assert loop.time() == t0

    run_virtual(main())


def test_a_freeze_comes_before_a_due_full_pass(freezes: list[int]) -> None:
    """Neither clock moves; as young collections bring the collector's next full pass
    near, a freeze comes first (so the pass walks nothing the run kept)."""
    now = [0.0]

    async def main() -> None:
        async with _refreezing(now, freezes):
            gc.set_threshold(700, 10, 10)
            gc.collect()  # the count of young collections starts from 0
            for _ in range(7):  # a full pass is still 4 or more of them away
                gc.collect(1)
                await _turns()
            assert len(freezes) == 1
            gc.collect(1)
            gc.collect(1)
            await _turns()
            assert len(freezes) == 2

    run_virtual(main())


def test_a_forked_childs_collections_bring_no_freeze(
    freezes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process forked during the run (a tool's ``os.fork``, multiprocessing's default on
    Linux) has the collector hook but not the loop: it scheduled a freeze on its copy of
    the parent's loop, and wrote to the self-pipe the two share (a wake-up for nothing)."""
    now = [100.0]

    async def main() -> None:
        async with _refreezing(now, freezes):
            parent = os.getpid()
            monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # as in the child
            now[0] += 5.0
            gc.collect(0)
            monkeypatch.setattr(os, "getpid", lambda: parent)
            await _turns()
            assert len(freezes) == 1  # the "child's" collection scheduled nothing
            gc.collect(0)
            await _turns()
            assert len(freezes) == 2  # the parent's does

    run_virtual(main())
