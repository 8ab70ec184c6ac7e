"""One attempt at a recorded run, around :meth:`Fleet.run` / :meth:`Fleet.resume`: what
is written before the sessions start, what happens when they end (or are cancelled),
and how a resumed attempt's result joins the sessions that were already done."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError, RunNotFound, StoreError
from agentflow._events import Event, FleetStartEvent
from agentflow._gather import gather_or_cancel
from agentflow._logging import get_logger
from agentflow._sendable import check_sendable
from agentflow._session import Session, SessionResult
from agentflow.store._budgets import recharge
from agentflow.store._claims import SessionGate, Ticker
from agentflow.store._codec import check_one_config_per_name, encode
from agentflow.store._earlier import (
    active_wall_s,
    check_all_sessions,
    stored_retries,
    virtual_clock,
)
from agentflow.store._peak import recorded_peak
from agentflow.store._policies import restore_keys
from agentflow.store._protocol import Store
from agentflow.store._recorder import LeaseKeeper, Recorder
from agentflow.store._records import (
    FINAL_STATUSES,
    RunAttempt,
    SessionEnded,
    check_name,
    shortened,
)
from agentflow.store._replay import replay_tools
from agentflow.store._resume import agents_by_name, plan_resume, stored_result
from agentflow.typing import Clock

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow._fleet import FleetResult

__all__ = ["DurableRun", "new_run_id"]

_log = get_logger("agentflow.store")


def new_run_id() -> str:
    """A fresh run id: UTC date and time, then 8 random hex digits (sortable, unique)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class DurableRun:
    """The store's part of one attempt at a run (fresh, or resumed)."""

    def __init__(
        self, store: Store, run_id: str, attempt: int, lease_ttl_s: float, clock: Clock
    ) -> None:
        self.store = store
        self.clock = clock
        self.start_ns = clock()
        self.run_id = run_id
        self.attempt = attempt
        self.recorder = Recorder(store, run_id, attempt)
        self.ticker = Ticker(lease_ttl_s / 3)
        self.leases = LeaseKeeper(store, run_id, lease_ttl_s, self.ticker)
        self.recorder.lost = self.leases.lost  # a session whose lease is lost stops
        #: A resumed attempt's gate (the sessions it runs are claimed as they start).
        self.gate: SessionGate | None = None
        #: Per session of the run, in order: a Session that runs now (or, resumed, may
        #: run: see the gate), or a done result.
        self.entries: list[Session | SessionResult] = []
        self.prior_retries = 0
        self.prior_wall_s = 0.0
        #: When the run was created (``StoredRun.created_wall_ns``): with its id, which
        #: recorded run this is (the budgets' counted attempts are keyed by both).
        self.created_wall_ns: int | None = None
        #: Subscribed to the attempt's events: the fleet's start, as its FleetStartEvent
        #: told it (a cancelled attempt's end has no result to read it from).
        self.fleet_start = FleetStart()
        # A fresh run's sessions that ended, whose leases go back (see _session_ended).
        self._ended: list[str] = []
        self._releasing: asyncio.Task[None] | None = None

    @property
    def to_run(self) -> list[Session]:
        """The sessions this attempt runs."""
        return [e for e in self.entries if isinstance(e, Session)]

    @classmethod
    async def fresh(
        cls,
        store: Store,
        sessions: Sequence[Session],
        *,
        run_id: str | None,
        config: Mapping[str, Any] | None,
        clock: Clock,
        lease_ttl_s: float,
    ) -> DurableRun:
        """Record a new run and its sessions, and take their leases.

        Raises:
            ConfigError: ``run_id`` is already in the store, or is empty; it, a session
                id or an agent name holds a NUL or is too long (:func:`check_name`);
                ``config`` or a session's metadata holds a lone surrogate; two agents
                of one name differ (:func:`check_one_config_per_name`).
            StoreError: another worker holds some of the sessions' leases (two runs of
                one id started at once through a store without ``create_run``).
        """
        if run_id is not None:
            if not isinstance(run_id, str) or not run_id.strip():
                raise ConfigError(f"run_id must be a non-empty string, got {run_id!r}")
            check_name(run_id, "run_id")
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError(
                f"run_config must be a mapping (JSON-able facts), got {type(config).__name__}"
            )
        # What is kept but never sent: not checked when made (a session's metadata may
        # hold objects JSON has no form for — kept as their repr — but no lone surrogate).
        # Left out at the run's end, the run's row took every session's with it.
        check_sendable(config, "run_config", encode=encode, carrier="a run store")
        for s in sessions:
            label = f"session {shortened(str(s.session_id))!r}"
            check_name(s.session_id, f"{label}: session_id")
            check_name(s.agent.name, f"{label}: its agent's name")
            check_sendable(s.metadata, f"{label}: metadata", encode=encode, carrier="a run store")
        check_one_config_per_name(s.agent for s in sessions)
        await store.open()
        if run_id is not None:
            with contextlib.suppress(RunNotFound):
                await store.load(run_id)
                raise ConfigError(
                    f"run_id {run_id!r} is already in {store!r}; resume it with Fleet.resume"
                )
        self = cls(store, run_id or new_run_id(), 0, lease_ttl_s, clock)
        self.entries = list(sessions)
        self.recorder.track_policies({id(s.agent): s.agent for s in sessions}.values())
        if getattr(store, "release_each_session", True):
            self.recorder.on_session_end = self._session_ended
        self.created_wall_ns = time.time_ns()
        await self.recorder.start_run(
            sessions, self.created_wall_ns, clock(), dict(config or {}) or None
        )
        ids = [s.session_id for s in sessions]
        try:
            got = await self.leases.claim(ids)
        except BaseException:
            # Cancelled (or failed) while claiming: end the attempt (recorded, the run
            # lock the claim took given back), or the lock stayed held until the store
            # closed, refusing every later resume of the run. (Not around ``start_run``:
            # a run id another worker created is refused there, its run not ours to end.)
            await self._abandon()
            raise
        if len(got) < len(ids):
            # Another worker holds them (a store without create_run let two runs of one
            # id through): running them here would run every tool twice.
            await self.leases.release()
            await store.flush()  # (a session's start left out says why)
            taken = sorted(set(ids) - set(got))
            raise StoreError(
                f"run {self.run_id!r}: {len(taken)} of its {len(ids)} sessions are held by "
                f"another worker ({', '.join(map(repr, taken[:3]))}"
                f"{', ...' if len(taken) > 3 else ''}): nothing was run"
            )
        return self

    @classmethod
    async def resumed(
        cls,
        store: Store,
        run_id: str,
        agents: Iterable[Agent] | Mapping[str, Agent],
        *,
        clock: Clock,
        lease_ttl_s: float,
        window: int,
    ) -> DurableRun:
        """Plan the resumption of ``run_id``: sessions rebuilt from the store, agents
        checked; record the new attempt. Its unfinished sessions are claimed as they
        start, at most ``window`` held at once (:class:`SessionGate`), so that several
        workers resuming one run share it.

        Raises:
            RunNotFound: no such run.
            ConfigError: an agent is missing or differs from the one recorded, or
                ``run_id`` holds a NUL (:func:`check_name`).
            StoreError: fewer of the run's sessions are recorded than it was created
                with (:func:`_check_all_sessions`): nothing is recorded or run.
        """
        check_name(run_id, "run_id")
        by_name = agents_by_name(agents)  # once: ``agents`` may be an iterator
        await store.open()
        await store.flush()
        run = await store.load(run_id)
        await check_all_sessions(store, run)
        provisional = max((a.attempt for a in run.attempts), default=-1) + 1
        wall, now = time.time_ns(), clock()
        if virtual_clock(clock):
            # Virtual time keeps no pace with the wall clock (it may run far ahead of it,
            # or fall behind): through ``time.time_ns()`` this attempt's time line would
            # overlap the earlier ones', or leave a gap. It takes up the run's time line
            # where they left it instead (their last recorded reading).
            wall = run.timeline_end_ns()
        run.attempts.append(RunAttempt(attempt=provisional, wall_ns=wall, clock_ns=now))
        started = {s.session_id: (s.status, len(s.turns), s.ended_attempt) for s in run.sessions}
        plan = plan_resume(run, by_name, provisional)  # checks the agents before recording
        # Numbered by the store: another worker may be starting an attempt right now.
        attempt = await store.start_attempt(run_id, wall, now)
        self = cls(store, run_id, attempt, lease_ttl_s, clock)
        self.created_wall_ns = run.created_wall_ns
        try:
            # Budgets continue: what the run spent so far — charged only once the attempt
            # is the store's, so that a resume it refuses (another writer's run lock)
            # charges nothing, and trying again does not charge the run twice.
            recharge(run, by_name)
            self.prior_retries = stored_retries(run)
            self.prior_wall_s = active_wall_s(run)
            # The calibrators' fits continue, recorded where they were found.
            restored = restore_keys(run.policy_state, by_name.values())
            self.recorder.track_policies(by_name.values(), restored)
            for done in plan.newly_done:
                store.write(_ended(run_id, done))
            self.entries = plan.entries
            self.gate = SessionGate(self.leases, by_name, attempt, started, window, self.ticker)
        except BaseException:
            # The attempt started: end it (recorded, its run lock given back), or the
            # lock stayed held until the store closed, refusing every later resume.
            await self._abandon()
            raise
        return self

    async def _abandon(self) -> None:
        """End an attempt that failed before it ran anything (see :meth:`resumed`)."""
        try:
            await self.finish(None)
        except Exception as exc:  # (the failure that ended it is the one raised)
            _log.warning("store.attempt_end_failed", run_id=self.run_id, error=repr(exc))

    async def admit_all(self) -> None:
        """For ``Fleet(workers=N).resume``: every session to run is claimed and read
        again now (the parent hands them all to its workers at once), not as each
        starts; a session another process ended meanwhile joins the done ones. Each
        lease is given back as its session's end is recorded."""
        gate = self.gate
        assert gate is not None
        self.gate = None

        async def one(e: Session | SessionResult) -> Session | SessionResult:
            return await gate.admit(e) if isinstance(e, Session) else e

        # None goes on claiming after the attempt gave up.
        self.entries = await gather_or_cancel(*[one(e) for e in self.entries])
        if getattr(self.store, "release_each_session", True):
            self.recorder.on_session_end = self._session_ended

    async def reload(self, sessions: Sequence[Session]) -> list[Session | SessionResult]:
        """Sessions of this attempt whose worker was lost mid-run (a Ray actor), rebuilt
        from what the store has recorded of them: each continues after its last
        recorded turn (its recorded tool results used, not run again), or — when its
        final answer or its end was recorded — is done (its result). A resumed
        attempt's sessions were marked ``pending`` as it admitted them, so any other
        status is an end recorded by this attempt."""
        await self.store.flush()
        ids = [s.session_id for s in sessions]
        run = await self.store.load(self.run_id, ids)
        agents = {s.agent.name: s.agent for s in sessions}
        out: list[Session | SessionResult] = []
        for sid in ids:
            stored = next((x for x in run.sessions if x.session_id == sid), None)
            if stored is None:
                raise StoreError(f"run {self.run_id!r}: session {sid!r} is not in the store")
            if stored.status != "pending":  # its end was recorded (this attempt's)
                out.append(stored_result(run, stored, self.attempt))
                continue
            one = replace(run, sessions=[stored])
            plan = plan_resume(one, agents, self.attempt)
            for done in plan.newly_done:
                self.store.write(_ended(self.run_id, done))
            entry = plan.entries[0]
            if isinstance(entry, Session):
                entry._prepare = functools.partial(replay_tools, stored, entry)
            out.append(entry)
        return out

    def _session_ended(self, session_id: str) -> None:
        """A fresh run's session ended (its end is written): give its lease back, so
        another worker resuming the run takes it at once instead of waiting for this
        whole attempt to end. Releases are batched: one at a time, each of every
        session that ended meanwhile (a resumed run's gate releases its own)."""
        self._ended.append(session_id)
        if self._releasing is None or self._releasing.done():
            self._releasing = asyncio.get_running_loop().create_task(self._release_ended())

    async def _release_ended(self) -> None:
        while self._ended:
            ids, self._ended = self._ended, []
            try:
                await self.leases.release_some(ids)
            except StoreError as exc:  # the attempt's end releases them all anyway
                _log.warning("store.release_failed", run_id=self.run_id, error=str(exc))

    async def finish(self, result: FleetResult | None) -> None:
        """After the sessions ended (or were cancelled): record the attempt's end, give
        the leases back and commit everything (a cancelled run included)."""
        # Only the statuses: merge() (the caller's result) sorts every recorded turn
        # for a resumed run's peak, which is not to be done twice for one attempt.
        finished = result is not None and all(
            r.status in FINAL_STATUSES for r in self._sessions(result)
        )
        wall_s = self._wall_s(result)
        # The runner's count has the retries of turns that finally failed too (no turn
        # records them); without a result, those of the turns recorded are all known.
        retries = self.recorder.retries
        if result is not None:
            retries = max(retries, result.retries)
        # The fleet's own start: a stored report's origin, as the live report's — that of
        # a cancelled attempt too (no result: the start its FleetStartEvent told).
        start = result.start_ns if result is not None else self.fleet_start.start_ns
        start = start if self.to_run else None
        self.recorder.end_run(finished, wall_s, retries, start)
        closing = asyncio.ensure_future(self._close())
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            _log.warning("store.flush_cancelled", run_id=self.run_id)
            closing.add_done_callback(self._closed_late)
            raise

    def _wall_s(self, result: FleetResult | None) -> float:
        """This attempt's run time: none when it had no session to run (a finished run
        resumed: its time would lower the run's throughput, more at every resume)."""
        if not self.to_run:
            return 0.0
        if result is not None:
            return result.wall_s
        start = self.fleet_start.start_ns
        return (self.clock() - (self.start_ns if start is None else start)) / 1e9

    def _closed_late(self, closing: asyncio.Future[None]) -> None:
        """The attempt's close went on after its caller was cancelled: log how it failed,
        if it did (say, the store closed under it) — asyncio used to print it as an
        exception never retrieved, with two tracebacks."""
        if not closing.cancelled() and (exc := closing.exception()) is not None:
            _log.warning("store.close_failed", run_id=self.run_id, error=str(exc))

    async def _close(self) -> None:
        self.ticker.stop()
        if self._releasing is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._releasing
        try:
            await self.leases.release()
        finally:
            await self.store.flush()

    def merge(self, result: FleetResult) -> FleetResult:
        """The result of the whole run: this attempt's sessions among the done ones, in
        the run's order; retries and wall time of earlier attempts added (a resumed run's
        start is then unknown: its sessions span several attempts); a resumed run's peak
        in flight at least its recorded turns' (``agentflow report --store``'s figure).
        ``replicas`` stay this attempt's: a store keeps no replica's figures."""
        sessions = self._sessions(result)
        peak = result.peak_in_flight
        if self.attempt > 0:
            peak = max(peak, recorded_peak(sessions))
        return replace(
            result,
            sessions=sessions,
            peak_in_flight=peak,
            retries=result.retries + self.prior_retries,
            wall_s=self._wall_s(result) + self.prior_wall_s,
            run_id=self.run_id,
            start_ns=result.start_ns if self.attempt == 0 else None,
        )

    def _sessions(self, result: FleetResult) -> list[SessionResult]:
        """Every session of the run, in its order: this attempt's among the done ones."""
        ran = iter(result.sessions)
        return [next(ran) if isinstance(e, Session) else e for e in self.entries]


class FleetStart:
    """A sync event callback that keeps the ``start_ns`` of the attempt's
    ``FleetStartEvent`` (it reads no other event)."""

    event_types = frozenset({"fleet_start"})

    def __init__(self) -> None:
        self.start_ns: int | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, FleetStartEvent):
            self.start_ns = event.start_ns


def _ended(run_id: str, r: SessionResult) -> SessionEnded:
    return SessionEnded(
        run_id=run_id,
        session_id=r.session_id,
        status=r.status,
        final_output=r.final_output,
        error=None,
        turns=len(r.turns),
    )
