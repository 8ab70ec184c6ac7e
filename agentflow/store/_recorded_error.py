"""The error a session ended with, as a run store keeps it: its text, ``"Type: message"``
(redacted, as the JSON report's is), and back as an exception that reads the same.

The exception itself is gone once stored; what is read back is an instance of a class
named after the recorded type (a subclass of :class:`RecordedError`), so that every
output that shows an error as ``type(error).__name__`` and ``str(error)`` — the report's
``agents[].error``, the summaries' failure lines — shows the stored session's as it
showed the live one's: ``ServerError: http://… answered 500: …``. Rows written before
this form, ``repr(error)`` (``ServerError('http://… answered 500: …')``), read back the
same way as closely as the repr allows: a builtin exception's text as its class makes it
(``[Errno 2] No such file`` from ``FileNotFoundError(2, 'No such file')``), others' from
their arguments as Exception's ``str`` does; a class's own ``__repr__``, or keyword
arguments in it, leave the text as written.
"""

from __future__ import annotations

import ast
import builtins
import re
from functools import cache
from typing import Any

from agentflow._errors import AgentflowError

__all__ = ["RecordedError", "recorded_error"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NEW = re.compile(rf"({_NAME}): (.*)", re.DOTALL)
_OLD = re.compile(rf"({_NAME})\((.*)\)", re.DOTALL)
_ONLY = re.compile(_NAME)


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


def recorded_error(text: str) -> RecordedError:
    """The stored ``text`` (this form, or the older ``repr``) as an exception whose type
    name and ``str`` are the recorded type and message."""
    name, message = _parse(text)
    return _class(name)(message)


def _parse(text: str) -> tuple[str, str]:
    if _ONLY.fullmatch(text):  # an error with an empty message
        return text, ""
    if m := _NEW.fullmatch(text):
        return m[1], m[2]
    if m := _OLD.fullmatch(text):  # an older row: repr(error)
        name, inner = m[1], m[2]
        try:
            args = ast.literal_eval(f"({inner},)") if inner else ()
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return name, inner  # (keyword arguments; or redaction cut a literal)
        return name, _str_of(name, args)
    return "Error", text


def _str_of(name: str, args: tuple[Any, ...]) -> str:
    """The live ``str`` of an exception of type ``name`` built with ``args``: the
    builtin class's own where it is one (``[Errno 2] …`` of an OSError, a KeyError's
    quotes), else Exception's (the one argument, or the tuple of them)."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            return str(cls(*args))
        except Exception:  # args this class does not take: Exception's str
            pass
    if len(args) == 1:
        return str(args[0])
    return str(args) if args else ""


@cache
def _class(name: str) -> type[RecordedError]:
    return type(name, (RecordedError,), {"__module__": __name__, "__qualname__": name})
