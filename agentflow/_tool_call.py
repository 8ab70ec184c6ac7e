"""Calling a tool: a sync tool's call in its worker thread, the time limit, what it
raised made its :class:`ToolError`, and its result made text (``_tools.py``'s
:meth:`Tool.invoke` validates the arguments, then calls :func:`call_tool`)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

from agentflow._errors import ToolError, ToolTimeout
from agentflow._logging import get_logger
from agentflow._redact import message_of
from agentflow._threads import TOOL_THREADS
from agentflow._tool_text import to_text

__all__ = ["RaisedInThread", "call_in_thread", "call_tool", "raised"]

_log = get_logger("agentflow.tools")


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


async def call_tool(
    fn: Callable[..., Any], kwargs: dict[str, Any], *, name: str, limit: float, threaded: bool
) -> str:
    """Call tool ``name``'s ``fn`` with ``kwargs`` within ``limit`` seconds (``inf``: none),
    in a worker thread if ``threaded``; return its result as text.

    Raises:
        ToolTimeout: the call did not return in time.
        ToolError: the tool raised (see :meth:`Tool.invoke <agentflow.Tool.invoke>`), or
            its result cannot be made text.
    """
    deadline = asyncio.timeout(None if math.isinf(limit) else limit)
    in_thread = False
    running = asyncio.current_task()  # the task whose step runs the tool's code
    try:
        async with deadline:
            if threaded:
                in_thread = True
                call = functools.partial(
                    contextvars.copy_context().run, call_in_thread, fn, **kwargs
                )
                result = await asyncio.get_running_loop().run_in_executor(TOOL_THREADS, call)
            else:  # async (an object's async __call__ too), or a sync fn on the loop
                result = fn(**kwargs)
            if inspect.isawaitable(result):  # a plain wrapper around an async function
                result = await result
        if deadline.expired():  # it caught its cancellation and returned late
            raise TimeoutError
    except TimeoutError as exc:
        if not deadline.expired():
            raise raised(name, exc) from exc  # the tool's own TimeoutError
        if in_thread:
            _log.warning("tool.thread_left_running", tool=name, timeout_s=limit)
        raise ToolTimeout(tool=name, timeout_s=limit, threaded=in_thread) from None
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the session (or the run) is cancelled
        raise raised(name, exc) from exc  # the tool's own: an inner task it awaited
    except RaisedInThread as exc:
        raise raised(name, exc.error) from exc.error
    except Exception as exc:
        raise raised(name, exc) from exc
    except KeyboardInterrupt:
        raise  # the user's Ctrl-C: not the tool's failure
    except GeneratorExit as exc:
        # This coroutine closed (``coro.close()``, garbage collection) is thrown into
        # outside the task's step: re-raised. Raised by the tool's own code, in its
        # task's step, it is the tool's failure: as itself it ended the session with
        # "coroutine ignored GeneratorExit", even with tool_errors="return". Closed
        # with no loop running (collected after its loop closed): not the tool's.
        try:
            own = asyncio.current_task() is running
        except RuntimeError:  # no running event loop
            own = False
        if not own:
            raise
        raise raised(name, exc) from exc
    except BaseException as exc:
        # SystemExit above all (argparse on bad arguments, ``sys.exit()`` in a CLI-style
        # tool, raised in the worker thread and re-raised here): the tool failed, and
        # the model hears of it; left alone it would end every session and the process.
        raise raised(name, exc) from exc
    if isinstance(result, str):
        return result
    try:
        return to_text(result, tool=name)
    except ToolError:
        raise  # an iterator: to_text says why
    except Exception as exc:  # a cycle, a value whose str() raises
        raise ToolError(
            f"tool {name!r} returned a {type(result).__name__} that cannot be made "
            f"text: {type(exc).__name__}: {message_of(exc)}",
            tool=name,
        ) from exc


def raised(name: str, exc: BaseException) -> ToolError:
    """Tool ``name``'s failure: it raised ``exc``."""
    return ToolError(f"tool {name!r} raised {type(exc).__name__}: {message_of(exc)}", tool=name)
