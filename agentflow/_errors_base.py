"""The root of agentflow's exception tree (drawn in ``agentflow/_errors.py``, which
re-exports every class): :class:`AgentflowError`, its pickling, and :class:`ConfigError`."""

from __future__ import annotations

from typing import Any

from agentflow._redact import redact

__all__ = ["AgentflowError", "ConfigError"]


class AgentflowError(Exception):
    """Base of every error agentflow raises on purpose.

    Its message never holds a credential: every registered secret, ``Bearer`` token
    and URL userinfo in it is masked when the error is built (``agentflow._redact``),
    so ``str``, ``repr``, tracebacks and reports of it are safe to print.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its args and attributes, rebuilt without calling __init__: most
        # subclasses take keyword-only arguments, which Exception's own pickling (the
        # class called with ``args``) cannot pass — an error in a Fleet(workers=N)
        # result failed to unpickle in the parent, which then took the worker for dead.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls, *args)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigError(AgentflowError, ValueError):
    """A configuration value is wrong; the message names the field and the value."""
