"""A demo run recorded in a store (``--store``), and the one ``agentflow resume``
continues: what the run keeps of its configuration, and the run itself."""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError, StoreError
from agentflow._fleet import Fleet, FleetResult
from agentflow._redact import display_url
from agentflow.demo._config import DemoConfig
from agentflow.demo._stop import Stopper, run_stoppable
from agentflow.stats import SLO, RunJournal
from agentflow.store._runlock import RunLocks
from agentflow.transport import Timeouts
from agentflow.typing import Clock

if TYPE_CHECKING:
    from agentflow.report import LiveView
    from agentflow.store import SQLiteStore, Store

__all__ = ["recorded_config", "resume_config", "run_recorded"]

#: The :class:`DemoConfig` fields a recorded run keeps as they are.
_KEPT = ("agents", "profile", "seed", "time_scale", "max_concurrency", "turns",
         "max_tokens", "base_url", "model", "virtual", "fault_rate")  # fmt: skip
#: Keys a run recorded by an earlier release may lack (it resumes without them).
_LATER = frozenset({"fault_rate", "slos", "timeouts", "base_url_userinfo"})


def recorded_config(config: DemoConfig) -> dict[str, Any]:
    """What a recorded demo run keeps of its configuration (no key, no output paths):
    enough for :func:`resume_config` to rebuild the same workload, and to run the rest of
    it as the run began — its SLOs, fault rate and time limits.

    The server's URL is kept without its userinfo (``http://user:password@host/v1`` is a
    Basic-auth password): ``base_url_userinfo`` says there was one, so that a resume
    asks for it again (``--base-url``) rather than run without it."""
    demo: dict[str, Any] = {k: getattr(config, k) for k in _KEPT}
    if config.base_url is not None:
        demo["base_url"] = display_url(config.base_url)
        if demo["base_url"] != config.base_url:
            demo["base_url_userinfo"] = True
    demo["slos"] = [asdict(slo) for slo in config.slos]
    demo["timeouts"] = None if config.timeouts is None else asdict(config.timeouts)
    return {"kind": "agentflow-demo", "demo": demo}


def resume_config(
    recorded: dict[str, Any] | None,
    run_id: str,
    *,
    base_url: str | None = None,
    **overrides: Any,
) -> DemoConfig:
    """The :class:`DemoConfig` that resumes recorded demo run ``run_id``: the recorded
    settings (a run recorded before SLOs, fault rate and time limits were kept resumes
    with none), then ``overrides``.

    Args:
        base_url: the run's server again, with the userinfo (``user:password@``) the
            store does not keep; it must name the recorded server.

    Raises:
        ConfigError: the run was not recorded by ``agentflow demo``; its server's URL
            had userinfo and ``base_url`` is not given; ``base_url`` is not the run's
            server (or the run had none).
        StoreError: another live process writes the run in the ``store`` override (see
            ``RunLocks.refuse_if_held``).
    """
    if not isinstance(recorded, dict) or recorded.get("kind") != "agentflow-demo":
        raise ConfigError(f"resume: run {run_id!r} was not recorded by `agentflow demo --store`")
    values = _recorded_values(recorded.get("demo"), run_id)
    values["base_url"] = _server(values, run_id, base_url)
    try:
        values["turns"] = tuple(values["turns"])
        values["slos"] = tuple(SLO(**slo) for slo in values.get("slos") or ())
        timeouts = values.get("timeouts")
        values["timeouts"] = None if timeouts is None else Timeouts(**timeouts)
        config = DemoConfig(**{**values, "resume": run_id, **overrides})
    except (TypeError, ValueError) as e:  # a ConfigError names its own field
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(
            f"resume: the demo configuration recorded with run {run_id!r} is not one this "
            f"agentflow reads ({e}); resume it with the release that recorded it"
        ) from None
    if config.store is not None:  # refused now, not after the simulator child started
        RunLocks(config.store).refuse_if_held(run_id)
    return config


def _recorded_values(demo: object, run_id: str) -> dict[str, Any]:
    """The recorded run's settings, checked to be the ones :func:`recorded_config` keeps
    (a run from an earlier release may lack :data:`_LATER`'s): a key a later release
    added, or one missing, is a :class:`ConfigError` that names it, not a traceback."""
    if not isinstance(demo, dict):
        raise ConfigError(
            f"resume: the demo configuration recorded with run {run_id!r} is not an object "
            f"(got {type(demo).__name__})"
        )
    unknown = sorted(set(demo) - set(_KEPT) - _LATER)
    if unknown:
        raise ConfigError(
            f"resume: run {run_id!r} was recorded with settings this agentflow does not "
            f"know ({', '.join(map(repr, unknown))}); resume it with the release that "
            "recorded it"
        )
    missing = sorted(set(_KEPT) - _LATER - set(demo))
    if missing:
        raise ConfigError(
            f"resume: the demo configuration recorded with run {run_id!r} lacks "
            f"{', '.join(map(repr, missing))}"
        )
    return dict(demo)


def _server(values: dict[str, Any], run_id: str, given: str | None) -> str | None:
    """The server URL a resume of ``run_id`` runs against: ``given`` if it names the
    recorded one (it may add userinfo), else the recorded one — unless that one had
    userinfo, which was not stored: then the resume is refused, rather than sent
    without its credentials."""
    recorded: str | None = values.get("base_url")
    userinfo = bool(values.pop("base_url_userinfo", False))
    if given is None:
        if userinfo:
            raise ConfigError(
                f"resume: run {run_id!r} ran against {recorded} with credentials in its URL "
                "(user:password@), which the store does not keep: give the URL again with "
                "them, --base-url http://USER:PASSWORD@HOST/…"
            )
        return recorded
    if recorded is None:
        raise ConfigError(
            f"resume: run {run_id!r} ran on the embedded simulator, not against a server; "
            "drop --base-url"
        )
    if display_url(given) != display_url(recorded):
        raise ConfigError(
            f"resume: --base-url {display_url(given)} is not the server run {run_id!r} "
            f"was recorded against ({display_url(recorded)})"
        )
    return given


async def run_recorded(
    config: DemoConfig,
    path: Path,
    fleet: Fleet,
    sessions: list[Any],
    agents: list[Any],
    stopper: Stopper,
    clock: Clock,
    journal: RunJournal | None = None,
    view: LiveView | None = None,
) -> FleetResult:
    """Run (or, with ``config.resume``, resume) the demo's fleet recorded in the SQLite
    store at ``path``; after a stop signal, the result is read back from the store. A
    resumed run's result starts (``start_ns``) at the run's first start (see
    :func:`_run_start`), and its ``journal`` (subscribed to this attempt) is made the
    whole run's (see :func:`_whole_run_journal`); its live ``view`` counts the sessions
    that ended in earlier attempts as done (see :func:`_ended_earlier`).

    Raises:
        ConfigError: the store cannot be opened (not a database, not an agentflow store,
            another version's), before the run is announced or begins.
    """
    from agentflow.store import load_result, new_run_id

    command, verb = ("resume", "resuming") if config.resume is not None else ("demo", "recording")
    # Opened before the run is announced: a file that is no store is a bad --store.
    store = await open_store(path, command)
    fleet.store = store
    run_id = config.resume or new_run_id()
    # Said now, not only at the end: after a kill -9 this line is how to resume it.
    print(
        f"agentflow {command}: {verb} run {run_id} in {path} "
        f"(resume it with: agentflow resume {run_id} --store {path})",
        file=sys.stderr,
        flush=True,
    )
    try:
        if config.resume is not None:
            if view is not None:
                done, failed = await _ended_earlier(store, run_id)
                view.done += done
                view.failed += failed
            result = await run_stoppable(
                fleet, [], stopper, clock, begin=lambda: fleet.resume(run_id, agents=agents)
            )
        else:
            result = await run_stoppable(
                fleet,
                sessions,
                stopper,
                clock,
                begin=lambda: fleet.run(
                    sessions, run_id=run_id, run_config=recorded_config(config)
                ),
            )
        stopped = stopper.signal is not None
        if stopped:  # the store has every session, as far as it got
            result = await load_result(store, run_id)
        if config.resume is not None:
            result = replace(result, start_ns=await _run_start(store, run_id, stopped))
            if journal is not None:
                await _whole_run_journal(store, run_id, journal, stopped)
        return result
    finally:
        await store.aclose()


async def open_store(path: Path, command: str, *, journal: bool | None = None) -> SQLiteStore:
    """The SQLite store at ``path``, opened (``journal``: see :class:`SQLiteStore`).

    Raises:
        ConfigError: it cannot be opened — not a database, not an agentflow store,
            another version's, a place no file can be made — naming ``--store`` (the
            command's argument: one line, exit 2, rather than a ``StoreError``).
    """
    from agentflow.store import SQLiteStore

    store = SQLiteStore(path, journal=journal)
    try:
        await store.open()
    except StoreError as exc:
        await store.aclose()
        reason = str(exc).removeprefix(f"{path}: ")
        raise ConfigError(f"{command}: --store {path}: {reason}") from None
    return store


async def _ended_earlier(store: Store, run_id: str) -> tuple[int, int]:
    """How many sessions of recorded run ``run_id`` a resumption does not run again
    (``not_run_again``: those that ended, and those whose final answer was recorded), and
    how many of those did not complete (``max_turns``, an error: the live view's failed
    count, as it counts this attempt's). They send no event; a live view counted only this
    attempt's ends, and its sessions bar stayed short of its total (all of the run's) at
    the end. (0, 0) for a run not found (the resumption says so).

    It reads the whole run once more before the resumption does: ~0.5 s per 1,000
    recorded sessions here, for the view alone."""
    from agentflow.store._resume import answered, not_run_again

    try:
        run = await store.load(run_id)
    except StoreError:
        return 0, 0
    left = [s for s in run.sessions if not_run_again(s)]
    return len(left), sum(s.status != "completed" and not answered(s) for s in left)


async def _run_start(store: Store, run_id: str, read_back: bool) -> int | None:
    """When the run's first attempt started, on the clock of a resumed run's result: its
    earlier attempts' turns are on this process's clock (``Fleet.resume``'s result; the
    last attempt is this one), or, ``read_back`` (``load_result``), on the first
    attempt's. Its report counts times from there, as ``agentflow report --store`` does —
    not from this process's start, after the earlier turns (at negative times then)."""
    run = await store.load(run_id, sessions=[])
    first = next((a for a in run.attempts if a.attempt == 0), None)
    if first is None:
        return None
    return first.clock_ns + (0 if read_back else run.clock_offset(0, run.attempts[-1].attempt))


async def _whole_run_journal(
    store: Store, run_id: str, journal: RunJournal, read_back: bool
) -> None:
    """Make ``journal``, subscribed to this attempt of a resumed run, the whole run's, on
    the clock of the run's result (this attempt's, or ``read_back``, the first's): its
    tool calls are every attempt's, as recorded (``agentflow report --store``'s, the
    earlier attempts' calls and durations were missing: ``fleet.tool_calls`` 3,352
    beside the tools' 3,339), and it saw no compaction (the earlier attempts' were not
    seen, nor recorded: ``fleet.compaction`` is ``null``, as from the store). Its retries
    and errors other than tools' are this attempt's, as it noted them (the earlier
    attempts' are placed from their record)."""
    run = await store.load(run_id)
    journal.add_stored(run, to_attempt=0 if read_back else None)
