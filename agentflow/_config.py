"""One way to configure each thing: the old spellings still work, with a
:class:`DeprecationWarning` naming the new one, and two settings that contradict each other
are a :class:`~agentflow.ConfigError` naming both (``docs/guide.md``, "One way to set each
thing").
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentflow._counts import check_count
from agentflow._errors import ConfigError

if TYPE_CHECKING:
    from agentflow.sched import Limits

__all__ = ["DEFAULT_MAX_CONCURRENCY", "fleet_concurrency", "session_run_internals"]

#: ``Fleet(max_concurrency=)`` when not given.
DEFAULT_MAX_CONCURRENCY = 64

_RUN_INTERNALS = ("bus", "runner", "tool_limit", "turn_log")


def fleet_concurrency(max_concurrency: int | None, limits: Limits) -> tuple[int, Limits]:
    """The fleet's one bound on requests in flight, and its limits carrying it.

    ``Fleet(max_concurrency=)`` is the way to set it. ``Fleet(limits=Limits(max_in_flight=))``
    set the same bound (and silently won); it still does, with a DeprecationWarning, and
    the two given with different values are a ConfigError. ``Limits.max_in_flight`` stays
    the way to bound one :class:`~agentflow.Replica`.
    """
    given = limits.max_in_flight
    if max_concurrency is not None:
        check_count(max_concurrency, "Fleet.max_concurrency")
    if given is not None:
        if max_concurrency is not None and max_concurrency != given:
            raise ConfigError(
                f"Fleet(max_concurrency={max_concurrency}) and "
                f"Fleet(limits=Limits(max_in_flight={given})) set the same bound to different "
                f"values; set only max_concurrency"
            )
        warnings.warn(
            f"Fleet(limits=Limits(max_in_flight={given})) is deprecated; use "
            f"Fleet(max_concurrency={given}) (Limits.max_in_flight is for a Replica's limits)",
            DeprecationWarning,
            stacklevel=3,
        )
        max_concurrency = given
    if max_concurrency is None:  # (a given max_in_flight is an int ≥ 1: Limits checks it)
        max_concurrency = DEFAULT_MAX_CONCURRENCY
    return max_concurrency, dataclasses.replace(limits, max_in_flight=max_concurrency)


def session_run_internals(old: Mapping[str, Any], private: dict[str, Any]) -> dict[str, Any]:
    """``Session.run``'s fleet wiring from its old public names (``bus=``, ``runner=``,
    ``tool_limit=``, ``turn_log=``), with a DeprecationWarning, merged into the private
    ones (``_bus=``, …) a :class:`~agentflow.Fleet` passes. Giving both spellings of one,
    or a name ``run`` never took, is an error."""
    for name, value in old.items():
        if name not in _RUN_INTERNALS:
            raise TypeError(f"Session.run() got an unexpected keyword argument {name!r}")
        if private.get(name) is not None:
            raise ConfigError(f"Session.run() got both {name}= and _{name}=; pass only _{name}=")
        warnings.warn(
            f"Session.run({name}=) is deprecated: it is a Fleet's internal wiring, passed as "
            f"_{name}= by the Fleet; run a session alone with Session.run(transport, "
            f"callbacks=..., retry=...)",
            DeprecationWarning,
            stacklevel=3,
        )
        private[name] = value
    return private
