"""Counts a user gives — slots, threads, tokens per chunk, a fleet's concurrency — checked
alike: :func:`check_count`, an int (never a bool) in a range, the error naming the field
and the value; and :func:`check_flag`, a switch that must be ``True`` or ``False``. The
sibling of :mod:`agentflow._seconds`; it imports only the exception, so that the simulator
(a server, :mod:`agentflow.sim`) can share it with the client side."""

from __future__ import annotations

from typing import overload

from agentflow._errors import ConfigError
from agentflow._seconds import shown

__all__ = ["check_count", "check_flag"]


@overload
def check_count(value: object, name: str, low: int = 1, high: int | None = None) -> int: ...
@overload
def check_count(
    value: object, name: str, low: int = 1, high: int | None = None, *, none: str
) -> int | None: ...
def check_count(
    value: object, name: str, low: int = 1, high: int | None = None, *, none: str | None = None
) -> int | None:
    """``value``, if it is an int (not a bool) in [low, high] — at least ``low`` when
    ``high`` is ``None``; with ``none`` (what ``None`` means there: ``"no cap"``), ``None``
    too.

    Raises:
        ConfigError: ``{name} must be an int ≥ {low}, got {value!r}`` (``an int in
            [low, high]`` when there is a ``high``; ``… or None (no cap)`` with ``none``).
    """
    if value is None and none is not None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        need = f"an int ≥ {low:,}" if high is None else f"an int in [{low:,}, {high:,}]"
        if none is not None:
            need += f" or None ({none})"
        raise ConfigError(f"{name} must be {need}, got {shown(value)}")
    return value


def check_flag(value: object, name: str) -> bool:
    """``value``, if it is ``True`` or ``False``: a switch given ``"no"``, ``"false"`` or
    ``None`` is refused rather than read by its truth (``"no"`` would turn it on).

    Raises:
        ConfigError: ``{name} must be True or False, got {value!r}``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {shown(value)}")
    return value
