"""The checks before a sharded run starts: everything the workers are sent must pickle
(and, for Ray actors, not refer to the driver's ``__main__``), and the fleet's settings
must mean the same in every worker."""

from __future__ import annotations

import asyncio
import io
import pickle
import time
import types
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._session import Session
from agentflow.sched import Limits
from agentflow.transport._shared import EndpointTransport

if TYPE_CHECKING:
    from agentflow._fleet import Fleet

__all__ = ["check_picklable"]


def check_picklable(fleet: Fleet, sessions: list[Session]) -> list[bytes]:
    """Each session pickled; a :class:`ConfigError` naming the agent or tool (or the
    transport) that does not pickle — with ``backend="ray"``, also one naming whatever
    a session pickles by reference to the driver's ``__main__`` (see :func:`_refuse_main`;
    the start config's policy, router, retry and transports go by Ray's cloudpickle,
    which sends ``__main__``'s by value)."""
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
                f"{replica.transport.endpoint!r} does not ({exc}); "
                f"{_transport_hint(replica.transport)}"
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
    ray = fleet.backend == "ray"
    checked: set[int] = set()
    out = []
    for s in sessions:
        agent = s.agent
        if id(agent) not in checked:
            checked.add(id(agent))
            _check_agent(agent)
            if ray:
                _refuse_main(agent, f"agent {agent.name!r}")
        try:
            if ray:
                out.append(_refuse_main(s, f"session {s.session_id!r} (agent {agent.name!r})"))
            else:
                out.append(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL))
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"session {s.session_id!r} (agent {agent.name!r}) does not pickle for "
                f"Fleet(workers=...): {exc}"
            ) from exc
    return out


def _transport_hint(transport: object) -> str:
    """What to do about a transport that does not pickle."""
    if isinstance(transport, EndpointTransport):  # HTTPTransport, AiohttpTransport
        return (
            "what you gave it must pickle too — an ssl= context or an aiohttp session= "
            "does not: leave it out, and each worker makes its own"
        )
    return (
        "use a transport that pickles, such as HTTPTransport or AiohttpTransport "
        "for the same endpoint"
    )


class _MainRefs(pickle.Pickler):
    """A pickler that notes each function or class it pickles by reference to the
    ``__main__`` module (pickle names them ``__main__.<name>``)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.found: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType | type) and obj.__module__ == "__main__":
            name = f"__main__.{obj.__qualname__}"
            if name not in self.found:
                self.found.append(name)
        return NotImplemented  # pickled as pickle would


def _refuse_main(obj: Any, what: str) -> bytes:
    """``obj`` pickled; a :class:`ConfigError` naming ``what`` if the pickle refers to
    the driver's ``__main__``: a Ray actor does not import the driver's main script
    (a worker process does), so every session of it would fail there."""
    buf = io.BytesIO()
    pickler = _MainRefs(buf)
    pickler.dump(obj)
    if pickler.found:
        raise ConfigError(
            f"{what} uses {', '.join(pickler.found)}, defined in the driver's main script: "
            "Fleet(workers=..., backend='ray') actors do not import it, so they could not "
            "load it; define it in a module the actors import (beside the script, or "
            "shipped with Ray's runtime_env) and import it from there"
        )
    return buf.getvalue()


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
