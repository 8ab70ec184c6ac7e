"""Session metadata that a worker's messages carry back to the parent (in a session's
result) and that misbehaves there when it is unpickled: module-level, so a worker process
can import it. Each pickles alike everywhere; unpickling tells a worker process (which has
a multiprocessing parent) from the test's own process."""

from __future__ import annotations

import multiprocessing
import threading


def _in_a_worker() -> bool:
    return multiprocessing.parent_process() is not None


def _unreadable(made_in_worker: bool) -> Unreadable:
    if made_in_worker and not _in_a_worker():
        raise ValueError("this object cannot be rebuilt in the parent")
    return Unreadable()


class Unreadable:
    """Metadata whose pickle from a worker fails to load in the parent with a
    ``ValueError`` (the error a closed pipe's read can raise too)."""

    def __reduce__(self) -> tuple[object, tuple[bool]]:
        return (_unreadable, (_in_a_worker(),))


#: Set by the test: a :class:`Gated` pickled in a worker loads in the parent only then.
RELEASE = threading.Event()
#: Set when a :class:`Gated` from a worker starts loading in the parent (its reader is
#: held there until :data:`RELEASE`).
HELD = threading.Event()


def _gated(made_in_worker: bool) -> Gated:
    if made_in_worker and not _in_a_worker():
        HELD.set()
        RELEASE.wait(120)
    return Gated()


class Gated:
    """Metadata whose pickle from a worker holds the parent's reader of that worker,
    as it loads, until the test sets :data:`RELEASE`: a message the parent reads late."""

    def __reduce__(self) -> tuple[object, tuple[bool]]:
        return (_gated, (_in_a_worker(),))
