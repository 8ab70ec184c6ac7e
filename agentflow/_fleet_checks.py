"""What a :class:`~agentflow.Fleet` checks before it runs anything: its options when it
is built (a bad value is a :class:`ConfigError` naming it; its bound on requests in
flight is ``_config.py``'s ``fleet_concurrency``), its transports as replicas and the
kinds of its scheduling parts, and the sessions given to a run."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, cast

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._event_bus import event_type_names
from agentflow._logging import get_logger
from agentflow._seconds import MAX_TIMEOUT_S, check_lease_ttl, check_seconds
from agentflow._session_checks import refused
from agentflow.sched import Limits, Replica, RetryPolicy, Router
from agentflow.sched._replica import check_transport

_log = get_logger("agentflow.fleet")

if TYPE_CHECKING:
    from agentflow._session import Session
    from agentflow.typing import Callback, Clock, Transport

__all__ = [
    "MAX_WORKERS",
    "check_callback",
    "check_callbacks",
    "check_drain",
    "check_event_types",
    "check_kind",
    "check_parts",
    "check_scale_out",
    "check_sessions",
    "check_store",
]

#: The most workers a fleet takes (``Fleet(workers=N)``): the parent's one loop reads
#: every worker (its events, its status every 0.25 s; a worker process has a reader thread
#: and a pipe), and it, not the workers, bounds a run long before this many.
MAX_WORKERS = 256


def check_scale_out(
    *,
    lease_ttl_s: float,
    workers: int | None,
    stop_timeout_s: float,
    heartbeat_timeout_s: float | None,
    backend: Literal["processes", "ray"],
) -> None:
    """Check the options of a run recorded in a store or spread over workers:
    ``lease_ttl_s``, ``workers``, ``stop_timeout_s``, ``heartbeat_timeout_s`` and
    ``backend`` (``"ray"`` needs ``workers`` and Ray installed)."""
    check_lease_ttl(lease_ttl_s, "lease_ttl_s")
    check_count(workers, "Fleet.workers", 1, MAX_WORKERS, none="this process only")
    # Finite: a cancel waits this long for a worker whose loop is blocked.
    check_seconds(stop_timeout_s, "stop_timeout_s", 0.001, MAX_TIMEOUT_S)
    if heartbeat_timeout_s is not None and (
        isinstance(heartbeat_timeout_s, bool)
        or not isinstance(heartbeat_timeout_s, int | float)
        or not 1 <= heartbeat_timeout_s <= MAX_TIMEOUT_S
    ):
        raise ConfigError(
            f"heartbeat_timeout_s must be a finite number of seconds in [1, {MAX_TIMEOUT_S:g}] "
            f"(a worker reports every 0.25 s) or None, got {heartbeat_timeout_s!r}"
        )
    if backend not in ("processes", "ray"):
        raise ConfigError(f"backend must be 'processes' or 'ray', got {backend!r}")
    if backend == "ray":
        if workers is None:
            raise ConfigError("Fleet(backend='ray') needs workers=N: how many Ray actors")
        if importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "Fleet(backend='ray') needs Ray, which is not installed: "
                "pip install 'agentflow[ray]'"
            )


def _replicas(
    target: Transport | Replica | Sequence[Transport | Replica],
) -> list[Replica]:
    """``Fleet(transport=...)`` as replicas: one transport or Replica, or a list of them
    (a URL string is a Sequence too, and was split into one replica per character)."""
    given: object = target  # (typed loosely: what is passed is what is checked)
    if isinstance(given, Sequence) and not isinstance(given, str | bytes):
        items: list[object] = list(given)
    else:
        items = [given]
    if not items:
        raise ConfigError("Fleet needs at least one transport or Replica")
    replicas = []
    for t in items:
        if not isinstance(t, Replica):
            check_transport(t, "Fleet.transport")
            t = Replica(transport=cast("Transport", t))
        replicas.append(t)
    return replicas


def check_parts(*, policy: object, limits: object, router: object, retry: object) -> None:
    """Raise a :class:`ConfigError` naming the argument unless each of a fleet's
    scheduling parts is of its kind: ``policy`` a name or a callable (an instance, not a
    policy class), ``limits`` a :class:`Limits`, ``router`` a :class:`Router`, ``retry`` a
    :class:`RetryPolicy` (each but ``policy`` may be ``None``). Each used to fail later:
    a dict for ``limits`` with an AttributeError, one for ``router`` when the first
    session ended, ``policy=123`` in every session, and ``retry="default"`` was taken."""
    if not isinstance(policy, str) and (isinstance(policy, type) or not callable(policy)):
        hint = f" (an instance: {policy.__name__}())" if isinstance(policy, type) else ""
        raise ConfigError(
            "Fleet.policy must be a policy name or a callable policy(ticket, state)"
            f"{hint}, got {policy!r}"
        )
    kinds: tuple[tuple[str, object, type], ...] = (
        ("limits", limits, Limits),
        ("router", router, Router),
        ("retry", retry, RetryPolicy),
    )
    for name, value, kind in kinds:
        check_kind(value, kind, f"Fleet.{name}")
    if isinstance(limits, Limits) and limits.kv_tokens is not None:
        # (It was refused only as the run started; the scheduler still says so too.)
        raise ConfigError(
            "Limits.kv_tokens is a budget per server: set it on Replica(limits=...), "
            "not on the fleet"
        )


def check_function(value: object, where: str, does: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` unless ``value`` is callable (a clock,
    a sleep: ``does`` says what it is for). A clock of ``'x'`` failed the run's first
    reading with a bare ``TypeError``."""
    if not callable(value):
        raise ConfigError(
            f"{where} must be a function ({does}), got {type(value).__name__} {value!r:.60}"
        )


def check_kind(value: object, kind: type, where: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` unless ``value`` is ``None`` or a
    ``kind`` (``Fleet``'s scheduling parts, ``Session.run``'s ``retry``)."""
    if value is not None and not isinstance(value, kind):
        raise ConfigError(f"{where} must be a {kind.__name__} or None, got {value!r}")


def check_callbacks(callbacks: object, where: str = "Fleet.callbacks") -> list[Callback]:
    """``callbacks`` (``Fleet(callbacks=...)``, ``Session.run(callbacks=...)``: ``where``)
    as a list, each one callable: else a :class:`ConfigError` naming it (a non-callable
    one used to fail on every event of every run)."""
    if isinstance(callbacks, str | bytes) or not isinstance(callbacks, Iterable):
        raise ConfigError(
            f"{where} must be a list of callables, got {type(callbacks).__name__} {callbacks!r:.60}"
        )
    listed = list(callbacks)
    for i, callback in enumerate(listed):
        check_callback(callback, f"{where}[{i}]")
    return listed


def check_callback(callback: object, where: str) -> None:
    """Raise :class:`ConfigError` unless ``callback`` is callable (sync or async), and
    its ``event_types``, if it declares them, are event type names."""
    if not callable(callback):
        raise ConfigError(
            f"{where} must be a callable taking an event, got {type(callback).__name__} "
            f"{callback!r:.60}"
        )
    check_event_types(getattr(callback, "event_types", None), f"{where}.event_types")


def check_event_types(types: object, where: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` unless ``types`` (a callback's
    ``event_types``) is ``None`` or a collection (not a string) of event type names. A
    misspelt name (``{"sesion_end"}``) silently delivered nothing, a string matched its
    substrings (``"token_x"`` read tokens), and a number failed at every event."""
    if types is None:
        return
    known = event_type_names()
    if isinstance(types, str | bytes) or not isinstance(types, Collection):
        raise ConfigError(
            f"{where} must be a set of event type names (or None: every event), got "
            f"{type(types).__name__} {types!r:.60}"
        )
    unknown = sorted(repr(t) for t in types if not isinstance(t, str) or t not in known)
    if unknown:
        raise ConfigError(
            f"{where} names unknown event types {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )


def check_drain(value: object) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a number of seconds > 0 (``inf``: no
    bound), as ``callback_drain_s`` must be."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"callback_drain_s must be a number of seconds > 0, got {value!r}")


def check_store(store: object, where: str) -> None:
    """Raise :class:`ConfigError` unless ``store`` is ``None`` or a run store (a
    :class:`~agentflow.store.Store`): a path used to fail with an AttributeError when the
    run opened it."""
    if store is None:
        return
    from agentflow.store._protocol import Store  # only with a store: the stores are heavy

    if not isinstance(store, Store):
        hint = "; wrap a path in SQLiteStore(path)" if isinstance(store, str | os.PathLike) else ""
        raise ConfigError(
            f"{where} must be a run store (agentflow.store.Store: SQLiteStore, PostgresStore)"
            f" or None{hint}, got {type(store).__name__} {store!r:.80}"
        )


def check_sessions(sessions: object, where: str) -> list[Session]:
    """``sessions`` as a list, each a :class:`~agentflow.Session`: else a
    :class:`ConfigError` naming ``where`` (``None`` was a TypeError, a task string or an
    agent in the list an AttributeError on ``session_id``)."""
    from agentflow._session import Session

    hint = "agent.session(task)"
    if isinstance(sessions, str | bytes | Session) or not isinstance(sessions, Iterable):
        raise ConfigError(
            f"{where} takes sessions: {hint} for each, in a list; got "
            f"{type(sessions).__name__} {sessions!r:.60}"
        )
    listed = list(sessions)
    for i, s in enumerate(listed):
        if not isinstance(s, Session):
            raise ConfigError(
                f"{where} takes sessions: {hint}; item {i} is {type(s).__name__} {s!r:.60}"
            )
    return listed


def _check_unique(sessions: list[Session]) -> None:
    """Refuse a run of ``sessions`` when two share an id, or one has run or is running
    (in another run: ``_session_checks.refused``); else hold them all for this run (the
    run releases them with :func:`_release`)."""
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise ConfigError(f"two sessions share session_id {s.session_id!r}")
        if s.result is not None or s._running:
            raise refused(s)
        seen.add(s.session_id)
    for s in sessions:
        s._running = True


def _release(sessions: list[Session]) -> None:
    """The run that held ``sessions`` (:func:`_check_unique`) ended."""
    for s in sessions:
        s._running = False


def _check_clock(clock: Clock) -> None:
    """Say so when a run on virtual time measures on the wall clock: its queue waits
    (trace send time less ready time) would mix two clocks and come out 0."""
    loop = asyncio.get_running_loop()
    if clock is time.perf_counter_ns and callable(getattr(loop, "clock_ns", None)):
        _log.warning(
            "fleet.clock_not_virtual",
            hint="the loop's time is virtual (run_virtual) but the fleet measures with "
            "time.perf_counter_ns: queue waits and tool durations mix two clocks; pass "
            "Fleet(..., clock=loop_clock) (agentflow.embedded)",
        )
