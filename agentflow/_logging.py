"""agentflow's loggers: structlog over the standard library's ``logging``.

A library must not print unless asked to, so agentflow's structlog loggers wrap
stdlib loggers named ``agentflow.*`` (configure them like any other: ``logging.basicConfig``
or your own handlers). Each line carries the ``agent``, ``session`` and ``turn`` bound
through contextvars by the session's turn loop, so a line from deep in the transport
still says whose turn it was. Secrets never reach a handler: values under keys that
name credentials are masked, and the rendered line goes through
:func:`agentflow._redact.redact` (every registered key, ``Bearer`` tokens, URL userinfo),
whatever field or ``repr`` carried it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import MutableMapping
from typing import Any

import structlog

from agentflow._redact import MASK
from agentflow._redact import redact as redact_text

__all__ = ["get_logger", "redact"]

_SECRET_KEYS = re.compile(r"(api[_-]?key|authorization|token|secret|password)", re.IGNORECASE)
_render_kv = structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)


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
    return redact_text(_render_kv(logger, method, event_dict))


def get_logger(name: str) -> Any:
    """A structlog logger over ``logging.getLogger(name)``, with contextvars and redaction."""
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
