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
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator

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
    """

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Freeze on the loop's next iteration (after the sessions' first steps), then
        periodically."""
        self._loop = loop
        self._handle = loop.call_soon(self._tick)

    def _tick(self) -> None:
        freeze_more()
        assert self._loop is not None
        self._handle = self._loop.call_later(self.every_s, self._tick)

    def stop(self) -> None:
        """Stop the periodic freezes (the run is over)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
