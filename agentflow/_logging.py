"""agentflow's loggers: structlog over the standard library's ``logging``.

A library must not print unless asked to, so agentflow's structlog loggers wrap
stdlib loggers named ``agentflow.*`` (configure them like any other: ``logging.basicConfig``
or your own handlers). Each line carries the ``agent``, ``session`` and ``turn`` bound
through contextvars by the session's turn loop, so a line from deep in the transport
still says whose turn it was. Secrets never reach a handler: values under keys that
name credentials are masked, and the rendered line goes through
:func:`agentflow._redact.redact` (every registered key, ``Bearer`` tokens, URL userinfo),
whatever field or ``repr`` carried it.

Nothing prints when the application configured no logging: the ``agentflow`` logger has
a :class:`logging.NullHandler`, so the standard library's last-resort handler (which
writes warnings to stderr when no handler exists) never takes agentflow's lines. structlog
itself is imported on the first line logged, not with ``agentflow`` (it imports rich when
rich is installed).
"""

from __future__ import annotations

import logging
import re
from collections.abc import MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from agentflow._redact import MASK
from agentflow._redact import redact as redact_text

__all__ = ["bound_contextvars", "get_logger", "redact"]

_SECRET_KEYS = re.compile(r"(api[_-]?key|authorization|token|secret|password)", re.IGNORECASE)
_render_kv: Any = None

# A library's loggers get a NullHandler: with no handler anywhere, logging's last resort
# would print agentflow's warnings to stderr although the application asked for nothing.
logging.getLogger("agentflow").addHandler(logging.NullHandler())


def redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: mask the values of fields named like credentials."""
    for key, value in event_dict.items():
        if (
            _SECRET_KEYS.search(key)
            and key not in ("output_tokens", "prompt_tokens")
            and not isinstance(value, int | float)
        ):
            event_dict[key] = MASK
    return event_dict


def render(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
    """structlog renderer: ``key=value`` pairs, with every known credential masked."""
    global _render_kv
    if _render_kv is None:
        import structlog

        _render_kv = structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)
    return redact_text(_render_kv(logger, method, event_dict))


def _wrap(name: str) -> Any:
    import structlog

    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            redact,
            render,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


class _Logger:
    """Builds its structlog logger on first use, so that importing a module that keeps a
    logger does not import structlog."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        logger = self._logger
        if logger is None:
            logger = self._logger = _wrap(self._name)
        return getattr(logger, attr)


def get_logger(name: str) -> Any:
    """A structlog logger over ``logging.getLogger(name)``, with contextvars and redaction
    (built on first use)."""
    return _Logger(name)


def bound_contextvars(**values: Any) -> AbstractContextManager[None]:
    """structlog's ``bound_contextvars``: ``values`` merged into every line logged inside."""
    import structlog.contextvars

    return structlog.contextvars.bound_contextvars(**values)
