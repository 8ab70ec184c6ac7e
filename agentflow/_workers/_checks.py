"""The checks before a sharded run starts: everything the workers are sent must pickle,
and the fleet's settings must mean the same in every worker."""

from __future__ import annotations

import asyncio
import pickle
import time
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._session import Session
from agentflow.sched import Limits

if TYPE_CHECKING:
    from agentflow._fleet import Fleet

__all__ = ["check_picklable"]


def check_picklable(fleet: Fleet, sessions: list[Session]) -> list[bytes]:
    """Each session pickled; a :class:`ConfigError` naming the agent or tool (or the
    transport) that does not pickle."""
    for replica in fleet.replicas:
        if type(replica.transport).__module__.startswith("agentflow.embedded"):
            raise ConfigError(
                f"Fleet(workers={fleet.workers}) cannot share the in-process "
                f"{type(replica.transport).__name__}: each worker would get its own copy of "
                "the simulator (no shared server, no shared limits); run `agentflow sim` "
                "(or SimServer) and use HTTPTransport"
            )
        if replica.limits is not None and replica.limits != Limits():
            raise ConfigError(
                f"Fleet(workers={fleet.workers}): per-replica limits (replica "
                f"{replica.transport.endpoint!r}) are not shared across workers yet; "
                "use the fleet's limits"
            )
        try:
            pickle.dumps(replica)
        except Exception as exc:
            raise ConfigError(
                f"Fleet(workers={fleet.workers}) needs transports that pickle (each worker "
                f"builds its own): {type(replica.transport).__name__} for "
                f"{replica.transport.endpoint!r} does not ({exc}); the in-process "
                "SimTransport cannot be shared — run `agentflow sim` and use HTTPTransport"
            ) from exc
    if fleet._clock is not time.perf_counter_ns or fleet._sleep is not asyncio.sleep:
        raise ConfigError(
            f"Fleet(workers={fleet.workers}) runs on each worker's own clock: a custom "
            "clock= or sleep= (virtual time, a test's fake) cannot cross processes"
        )
    for what in ("policy", "router", "retry"):
        try:
            pickle.dumps(getattr(fleet, what))
        except Exception as exc:
            raise ConfigError(
                f"Fleet(workers={fleet.workers}): the fleet's {what} "
                f"({type(getattr(fleet, what)).__name__}) does not pickle: {exc}"
            ) from exc
    checked: set[int] = set()
    out = []
    for s in sessions:
        agent = s.agent
        if id(agent) not in checked:
            checked.add(id(agent))
            _check_agent(agent)
        try:
            out.append(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:
            raise ConfigError(
                f"session {s.session_id!r} (agent {agent.name!r}) does not pickle for "
                f"Fleet(workers=...): {exc}"
            ) from exc
    return out


def _check_agent(agent: Any) -> None:
    context = getattr(agent, "context", None)
    if context is not None:
        from agentflow._context_chain import ContextChain

        if ContextChain.of(context).fleet is not None:
            raise ConfigError(
                f"agent {agent.name!r}: a FleetBudget counts in the process that holds it; "
                "with Fleet(workers=...) every worker's sessions would spend copies of it "
                "and it would never stop the run: run without workers, or bound the "
                "token rate with the fleet's Limits(tpm=...)"
            )
    try:
        pickle.dumps(agent)
        return
    except Exception as exc:
        first = exc
    for tool in getattr(agent, "tools", ()):
        try:
            pickle.dumps(tool)
        except Exception as exc:
            name = getattr(tool, "name", None) or getattr(tool, "__qualname__", repr(tool))
            raise ConfigError(
                f"agent {agent.name!r}: tool {name!r} does not pickle, so Fleet(workers=...) "
                "cannot send it to a worker; tools must be module-level functions "
                f"(no lambdas, closures or bound state that does not pickle): {exc}"
            ) from exc
    raise ConfigError(
        f"agent {agent.name!r} does not pickle, so Fleet(workers=...) cannot send it "
        f"to a worker: {first}"
    ) from first
