"""Keep what exists before a fleet runs out of the garbage collector's full passes.

CPython's cyclic collector periodically walks *every* tracked object it holds in its
oldest generation. A process that imported agentflow and built its agents and sessions
already holds tens of thousands of them, and a full pass then stops the event loop for
tens of milliseconds (over 150 ms measured in ``benchmarks/fidelity.py`` at 300
streams) — every stream's chunks wait, and every latency measured across the pause is
inflated. ``gc.freeze()`` moves the objects alive now into a permanent generation the
collector skips; they are still freed by reference counting as usual, only cycles among
them wait for ``gc.unfreeze()``. Objects made during the run are collected as before.

:func:`frozen_gc` freezes at the start of the outermost run and unfreezes at its end;
:func:`freeze_more` adds what was made since, once the sessions have all started (a
queued session holds ~50 tracked objects — its task, coroutines, closures, contexts —
and thousands of them are the bulk of the heap a full pass would walk). Between the two
the collector is paused: starting 4,000 sessions otherwise set off three full passes
before the second freeze (measured), each walking the sessions being started.
If something else froze the heap first (``gc.get_freeze_count() > 0``), it is left
alone: agentflow neither adds to nor undoes someone else's freeze.

:class:`Refreezer` keeps freezing what the run keeps, once a second of *real* time: on
a virtual-time loop (``run_virtual``) the loop's clock can run far slower than the CPU
work — a 4,000-session simulation did 11 s of work in 2.4 virtual seconds — so a timer
on loop time alone refroze it three times and full passes came back (13, 1.1 s in
total). It watches the collector (``gc.callbacks``): a collection that starts a real
second after the last freeze, or shortly before a full pass is due, schedules one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Refreezer", "freeze_more", "frozen_gc"]

_depth = 0
_owner = False
_paused = False


@contextlib.contextmanager
def frozen_gc(enabled: bool = True) -> Iterator[None]:
    """Freeze the current heap for the duration (re-entrant; see the module doc)."""
    global _depth, _owner, _paused
    if not enabled:
        yield
        return
    if _depth == 0 and gc.get_freeze_count() == 0:
        gc.freeze()
        _owner = True
        if gc.isenabled():  # paused until freeze_more(); left alone if the app disabled it
            gc.disable()
            _paused = True
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _owner:
            _owner = False
            _resume()
            gc.unfreeze()


def freeze_more() -> None:
    """Inside a freeze of ours, also freeze everything made since, and let the collector
    run again (no-op otherwise)."""
    if _owner:
        gc.freeze()
        _resume()


def _resume() -> None:
    global _paused
    if _paused:
        _paused = False
        gc.enable()


class Refreezer:
    """Calls :func:`freeze_more` once the sessions have started, then every ``every_s``.

    What a run keeps — finished turns, sessions waiting for their next turn — is frozen
    as it accumulates, so a full pass only walks what was made since the last freeze.
    Cycles that become garbage after being frozen wait for the run's end; a full pass
    in the benchmarks collected none.

    "Every ``every_s``" is on the loop's clock (a timer) and on ``clock`` (real time):
    a collection that starts when ``every_s`` of ``clock`` have gone by since the last
    freeze schedules one on the loop. The collector runs as the run allocates, so on a
    virtual-time loop, whose clock may hardly move while the CPU works, the run is still
    refrozen each real second. A young (generation 1) collection that starts when the
    collector's next full pass is at most two of them away schedules one too: a run
    that keeps more than a second's freeze can hold (a 4,000-session simulation did)
    would otherwise still get a full pass over what it kept since.

    Args:
        every_s: the period, in seconds.
        clock: real time in seconds (``time.monotonic``; injectable for tests).
    """

    def __init__(
        self, every_s: float = 1.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self._clock = clock
        self._handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0  # on clock: when a collection should schedule a freeze
        self._scheduled = False  # a freeze is on the loop's ready queue
        self._pid = os.getpid()  # (the process whose loop it is)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Freeze on the loop's next iteration (after the sessions' first steps), then
        periodically."""
        self._loop = loop
        self._pid = os.getpid()
        self._due = self._clock() + self.every_s
        self._handle = loop.call_soon(self._tick)
        gc.callbacks.append(self._on_gc)

    def _tick(self) -> None:
        self._freeze()
        if self._loop is not None:
            self._handle = self._loop.call_later(self.every_s, self._tick)

    def _freeze(self) -> None:
        self._scheduled = False
        if self._loop is None:  # stopped meanwhile
            return
        freeze_more()
        self._due = self._clock() + self.every_s

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, in whichever thread allocated: only schedule.
        if phase != "start" or self._scheduled or os.getpid() != self._pid:
            return  # (a forked child has the hook, not the loop: it would wake the parent's)
        # (get_count()[2]: young collections since the last full pass, which comes
        # once there are more than get_threshold()[2] of them.)
        soon_full = info["generation"] == 1 and gc.get_count()[2] >= gc.get_threshold()[2] - 2
        if not soon_full and self._clock() < self._due:
            return
        loop = self._loop
        if loop is None:
            return
        self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(self._freeze)

    def stop(self) -> None:
        """Stop the periodic freezes (the run is over)."""
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        self._loop = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
