"""Keep what exists before a fleet runs out of the garbage collector's full passes.

CPython's cyclic collector periodically walks *every* tracked object it holds in its
oldest generation. A process that imported agentflow and built its agents and sessions
already holds tens of thousands of them, and a full pass then stops the event loop for
tens of milliseconds (over 150 ms measured in ``benchmarks/fidelity.py`` at 300
streams) — every stream's chunks wait, and every latency measured across the pause is
inflated. ``gc.freeze()`` moves the objects alive now into a permanent generation the
collector skips; they are still freed by reference counting as usual, only cycles among
them wait for ``gc.unfreeze()``. Objects made during the run are collected as before.

:func:`frozen_gc` freezes at the start of the outermost run and unfreezes at its end.
If something else froze the heap first (``gc.get_freeze_count() > 0``), it is left
alone: agentflow neither adds to nor undoes someone else's freeze.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["frozen_gc"]

_depth = 0
_owner = False


@contextlib.contextmanager
def frozen_gc(enabled: bool = True) -> Iterator[None]:
    """Freeze the current heap for the duration (re-entrant; see the module doc)."""
    global _depth, _owner
    if not enabled:
        yield
        return
    if _depth == 0 and gc.get_freeze_count() == 0:
        gc.freeze()
        _owner = True
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _owner:
            _owner = False
            gc.unfreeze()
