"""The error a session ended with, as a run store keeps it: its text, ``"Type: message"``
(redacted, as the JSON report's is), and back as an exception that reads the same.

The exception itself is gone once stored; what is read back is an instance of a class
named after the recorded type (a subclass of :class:`RecordedError`), so that every
output that shows an error as ``type(error).__name__`` and ``str(error)`` — the report's
``agents[].error``, the summaries' failure lines — shows the stored session's as it
showed the live one's: ``ServerError: http://… answered 500: …``. Rows written before
this form, ``repr(error)`` (``ServerError('http://… answered 500: …')``), read back the
same way.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from typing import Any

from agentflow._errors import AgentflowError
from agentflow._redact import redact

__all__ = ["RecordedError", "error_text", "recorded_error"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NEW = re.compile(rf"({_NAME}): (.*)", re.DOTALL)
_OLD = re.compile(rf"({_NAME})\((.*)\)", re.DOTALL)


class RecordedError(AgentflowError):
    """The error a stored session ended with: its text (the exception itself is gone).
    An instance's class is named after the recorded type (see the module)."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The class is made at run time, so pickle cannot find it by reference (a
        # load_result with an errored session did not pickle): it is pickled as its
        # type's name and rebuilt here, the same class out of the same cache.
        if type(self) is RecordedError:
            return super().__reduce__()
        return (_recorded, (type(self).__name__, self.args, self.__dict__))


def _recorded(name: str, args: tuple[Any, ...], state: dict[str, Any]) -> RecordedError:
    cls = _class(name)
    error = cls.__new__(cls, *args)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


def error_text(error: BaseException) -> str:
    """What a store keeps of ``error``: ``"Type: message"``, redacted."""
    return redact(f"{type(error).__name__}: {error}")


def recorded_error(text: str) -> RecordedError:
    """The stored ``text`` (this form, or the older ``repr``) as an exception whose type
    name and ``str`` are the recorded type and message."""
    name, message = _parse(text)
    return _class(name)(message)


def _parse(text: str) -> tuple[str, str]:
    if m := _NEW.fullmatch(text):
        return m[1], m[2]
    if m := _OLD.fullmatch(text):  # an older row: repr(error)
        inner = m[2]
        try:
            value = ast.literal_eval(inner) if inner else ""
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return m[1], inner  # (redaction may have cut a literal)
        return m[1], value if isinstance(value, str) else str(value)
    return "Error", text


@cache
def _class(name: str) -> type[RecordedError]:
    return type(name, (RecordedError,), {"__module__": __name__, "__qualname__": name})
