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
a :class:`logging.NullHandler` (added by ``agentflow/__init__.py``, which every import of
an agentflow module runs first), so the standard library's last-resort handler (which
writes warnings to stderr when no handler exists) never takes agentflow's lines. structlog
itself is imported on the first line a handler could take, not with ``agentflow`` nor for
a line no handler takes (a level the stdlib logger is not enabled for, or no handler but
NullHandlers): structlog imports rich when rich is installed, ~100 ms that would
otherwise fall inside the first run's clock. The
``agent``/``session``/``turn`` context variables are structlog's by name
(``structlog_agent``...), made here without importing it.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import re
import sys
from collections.abc import MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from agentflow._redact import MASK
from agentflow._redact import redact as redact_text

__all__ = ["bound_contextvars", "dropped", "get_logger", "log_vars", "redact"]

_SECRET_KEYS = re.compile(r"(api[_-]?key|authorization|token|secret|password)", re.IGNORECASE)
_render_kv: Any = None


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


# structlog's names for its context variables: merge_contextvars takes every context
# variable whose name has this prefix, and bind_contextvars keeps them in _CONTEXT_VARS.
_PREFIX = "structlog_"
_VAR_KEYS = ("agent", "session", "turn")


@functools.cache
def log_vars() -> tuple[contextvars.ContextVar[Any], ...]:
    """The context variables for agent, session and turn that every log line carries, so a
    turn binds one with a single ``set``. They are structlog's (``bind_contextvars`` uses
    them, ``merge_contextvars`` merges them): taken from structlog when it is loaded
    already, else made here under its names and handed to it when it is (:func:`_share`)."""
    if "structlog.contextvars" in sys.modules:
        import structlog.contextvars

        out = []
        for key in _VAR_KEYS:
            token = structlog.contextvars.bind_contextvars(**{key: None})[key]
            token.var.reset(token)
            out.append(token.var)
        return tuple(out)
    # default=Ellipsis: what structlog's own variables hold while unbound.
    return tuple(contextvars.ContextVar(_PREFIX + key, default=...) for key in _VAR_KEYS)


def _share() -> None:
    """Register :func:`log_vars` with structlog (just imported), so its
    ``bind_contextvars`` sets the same variables rather than namesakes."""
    import structlog.contextvars

    known = getattr(structlog.contextvars, "_CONTEXT_VARS", None)
    if isinstance(known, dict):
        for var in log_vars():
            known.setdefault(var.name, var)


def _session_vars(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor, before ``merge_contextvars``: the turn's own
    ``agent``/``session``/``turn`` (:func:`log_vars`) where the call passed none — so they
    win over a namesake's (when structlog was imported after agentflow made its variables
    and the application bound those keys before agentflow's first line, two variables
    share each name, and ``merge_contextvars`` kept either one's value), and a value the
    call passed wins over them (``merge_contextvars`` sets only missing keys too)."""
    for key, var in zip(_VAR_KEYS, log_vars(), strict=True):
        value = var.get()
        if value is not ...:
            event_dict.setdefault(key, value)
    return event_dict


def _wrap(name: str) -> Any:
    import structlog

    _share()

    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            _session_vars,
            structlog.contextvars.merge_contextvars,
            redact,
            render,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


# The level of each of structlog's stdlib level methods.
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def dropped(*_: Any, **__: Any) -> None:
    """A line no handler can take: nothing to do."""


def _taken(logger: logging.Logger, level: int) -> bool:
    """Whether a line at ``level`` would reach a handler other than a NullHandler (such as
    the one on ``agentflow``): the logger is enabled for it, and one of its own or its
    ancestors' handlers (as far as ``propagate`` goes) is not a NullHandler — or, with no
    handler at all (the NullHandler removed), logging's last resort would take it. With
    only the NullHandler the last resort stays unused, so the line would go nowhere."""
    if not logger.isEnabledFor(level):
        return False
    found = False
    node: logging.Logger | None = logger
    while node is not None:
        for handler in node.handlers:
            if type(handler) is not logging.NullHandler:
                return True
            found = True
        node = node.parent if node.propagate else None
    last = logging.lastResort
    return not found and last is not None and level >= last.level


class _Logger:
    """Builds its structlog logger on first use, so that importing a module that keeps a
    logger does not import structlog; and a line that no handler would take (a level the
    stdlib logger is not enabled for, or only NullHandlers) is dropped here, so that it
    does not either (asked on every call: levels and handlers can change while the
    program runs)."""

    __slots__ = ("_logger", "_name", "_stdlib")

    def __init__(self, name: str) -> None:
        self._name = name
        # Looked up on first use, not at import: ``logging.config.dictConfig`` (and
        # ``fileConfig``) disables every logger that exists when it runs, so an
        # application that imports agentflow, then configures logging, lost its lines.
        self._stdlib: logging.Logger | None = None
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        level = _LEVELS.get(attr)
        if level is not None:
            stdlib = self._stdlib
            if stdlib is None:
                stdlib = self._stdlib = logging.getLogger(self._name)
            if not _taken(stdlib, level):
                return dropped
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

    _share()
    return structlog.contextvars.bound_contextvars(**values)
