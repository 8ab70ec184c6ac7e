"""What a tool raised, on its way to becoming the tool's :class:`ToolError`
(``_tools.py``): a sync tool's call in its worker thread, and an exception's text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RaisedInThread", "call_in_thread", "shown"]


class RaisedInThread(Exception):
    """A ``KeyboardInterrupt``, ``GeneratorExit`` or ``StopIteration`` a sync tool raised
    in its worker thread (``error``), on its way to the event loop as the tool's failure."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def call_in_thread(fn: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Call a sync tool in its worker thread. Ctrl-C reaches only the main thread, so a
    ``KeyboardInterrupt`` raised here is the tool's own (a ``GeneratorExit`` too: no
    coroutine of the session is being closed): it comes back a :class:`RaisedInThread`,
    the tool's failure. As itself it stopped the session's task, the run and the process.

    A ``StopIteration`` (``next()`` on an empty iterator) comes back the same way:
    asyncio cannot set it on the call's future (it logs a ``TypeError`` and leaves the
    future pending), so the call used to wait out its whole time limit and end as a false
    :class:`ToolTimeout`."""
    try:
        return fn(**kwargs)
    except (KeyboardInterrupt, GeneratorExit, StopIteration) as exc:
        raise RaisedInThread(exc) from exc


def shown(exc: BaseException) -> str:
    """``str(exc)``, or ``<unprintable TypeName>`` when that raises: the tool's failure is
    still a :class:`ToolError` (a raising ``__str__`` used to end the session instead)."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"
