"""Whether a callable a user hands agentflow (a callback, a tool) is async.

``inspect.iscoroutinefunction`` looks at the object itself only: an object whose
``__call__`` is an ``async def``, or a decorator's sync wrapper of one made with
``functools.wraps``, is not one to it. The event bus (callbacks) and tools (which
run on the event loop or in a worker thread) decide it the same way, here. It imports
nothing of the package.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["is_async"]


def is_async(fn: Any) -> bool:
    """Whether ``fn`` must be awaited: an ``async def`` (a ``functools.wraps`` wrapper of
    one too, ``inspect.iscoroutinefunction`` does not follow ``__wrapped__``), or an
    object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(inspect.unwrap(fn)):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - async __call__ on an object
    return call is not None and inspect.iscoroutinefunction(inspect.unwrap(call))
