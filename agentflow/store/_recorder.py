"""The fleet's side of a store: a :class:`~agentflow._session.TurnLog` that turns what
sessions finish into records, and the lease keeper of a run.

Everything here runs on the event loop's hot path, so it only builds small records
around objects that already exist (the assistant message, the trace) and hands them to
:meth:`Store.write`; encoding and committing happen on the store's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentflow._errors import LeaseLost, StoreError
from agentflow._logging import get_logger
from agentflow._redact import error_line, redact
from agentflow._trace import ToolCall
from agentflow.store._claims import Ticker
from agentflow.store._codec import agent_info, session_task
from agentflow.store._policies import Tracked, aliases, calibrator_of, calibrators
from agentflow.store._protocol import LeaseOwner, Store
from agentflow.store._records import (
    AgentInfo,
    PolicyState,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    TurnFinished,
)

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow._rewrite import RewriteItem
    from agentflow._session import Session, SessionResult, TurnRecord

__all__ = ["POLICY_EVERY_S", "LeaseKeeper", "Recorder"]

#: Seconds between two recordings of one calibrator's state at session ends (the
#: attempt's end always records it): the SQLite store's commit interval with its journal
#: (``JOURNAL_INTERVAL_S``), where only the last state per key is kept — more often, the
#: extra states (~145 µs of the loop's CPU each here, built and written) only narrow
#: what a ``kill -9`` takes back from an estimate that goes on learning.
POLICY_EVERY_S = 5.0

_log = get_logger("agentflow.store")


class Recorder:
    """Records one attempt at a run into ``store`` (see :class:`TurnLog`)."""

    __slots__ = (
        "_agents",
        "_aliased",
        "_calibrators",
        "_policy_saved",
        "attempt",
        "lost",
        "on_session_end",
        "retries",
        "run_id",
        "store",
    )

    def __init__(self, store: Store, run_id: str, attempt: int) -> None:
        self.store = store
        self.run_id = run_id
        self.attempt = attempt
        #: Retries in turns recorded by this attempt.
        self.retries = 0
        # id(agent) -> (the agent, kept so that its id stays its own; its AgentInfo).
        self._agents: dict[int, tuple[Agent, AgentInfo]] = {}
        # id(calibrator) -> its key, the calibrator, its aliases: the learnt state kept
        # with the run.
        self._calibrators: dict[int, Tracked] = {}
        # id(calibrator) of those whose aliases this attempt has written.
        self._aliased: set[int] = set()
        # id(calibrator) -> time.monotonic() of its last PolicyState.
        self._policy_saved: dict[int, float] = {}
        #: Called with a session's id once its end is written (a fresh run gives its
        #: lease back then: ``DurableRun``).
        self.on_session_end: Callable[[str], None] | None = None
        #: Sessions whose lease another worker took (the :class:`LeaseKeeper`'s set):
        #: their next turn or tool result ends them with :class:`LeaseLost`.
        self.lost: set[str] = set()

    def track_policies(
        self, agents: Iterable[Agent], keys: Mapping[int, str] | None = None
    ) -> None:
        """Keep the learnt state of the calibrators ``agents`` use (``store/_policies.py``):
        recorded when a session of theirs ends and when the attempt ends — under the key
        ``keys`` gives a calibrator (where a resume restored it from), else its own."""
        self._calibrators = calibrators(agents, keys)

    def _policy_state(self, tracked: Tracked) -> None:
        write, run_id = self.store.write, self.run_id
        write(PolicyState(run_id=run_id, key=tracked.key, state=tracked.calibrator.to_state()))
        cid = id(tracked.calibrator)
        if tracked.aliases and cid not in self._aliased:
            self._aliased.add(cid)
            key, state = aliases(tracked)
            write(PolicyState(run_id=run_id, key=key, state=state))

    async def start_run(
        self,
        sessions: Sequence[Session],
        wall_ns: int,
        clock_ns: int,
        config: dict[str, Any] | None,
    ) -> None:
        """Record the attempt's start (and, for attempt 0, every session's start):
        ``wall_ns`` and ``clock_ns`` are one moment on the wall clock and the fleet's.
        A new run (attempt 0) goes through the store's ``create_run`` where it has one
        (``PostgresStore``: the run's row made, or found taken, in one step)."""
        started = RunStarted(
            run_id=self.run_id,
            attempt=self.attempt,
            wall_ns=wall_ns,
            clock_ns=clock_ns,
            sessions=len(sessions),
            config=config,
        )
        create = getattr(self.store, "create_run", None) if self.attempt == 0 else None
        if create is not None:
            await create(started)
        else:
            self.store.write(started)
        if self.attempt == 0:
            for position, s in enumerate(sessions):
                self.store.write(
                    SessionStarted(
                        run_id=self.run_id,
                        session_id=s.session_id,
                        position=position,
                        agent=self._info(s.agent),
                        task=session_task(s),
                        metadata=dict(s.metadata),
                    )
                )

    def end_run(
        self,
        finished: bool,
        wall_s: float,
        retries: int | None = None,
        start_ns: int | None = None,
    ) -> None:
        """Record that this attempt ended cleanly (``finished``: every session final)
        after ``wall_s`` seconds on the fleet's clock, with ``retries`` retries (default:
        those of the turns it recorded); ``start_ns``: the fleet's start on its clock
        (:class:`RunEnded`)."""
        for tracked in self._calibrators.values():
            self._policy_state(tracked)
        self.store.write(
            RunEnded(
                run_id=self.run_id,
                attempt=self.attempt,
                wall_ns=time.time_ns(),
                status="finished" if finished else "partial",
                retries=self.retries if retries is None else retries,
                wall_s=wall_s,
                start_ns=start_ns,
            )
        )

    def _info(self, agent: Agent) -> AgentInfo:
        hit = self._agents.get(id(agent))
        if hit is not None:
            return hit[1]
        info = agent_info(agent)
        self._agents[id(agent)] = (agent, info)
        return info

    # --- TurnLog ------------------------------------------------------------------------

    def turn_starting(self, session: Session, turn: int) -> None:
        """Raise :class:`LeaseLost` before the turn's request is sent if another worker
        took the session's lease (the model is not asked, nothing is appended).

        Raises:
            LeaseLost: as :meth:`turn_finished` would, one request later.
        """
        if self.lost and session.session_id in self.lost:
            raise LeaseLost(self.run_id, session.session_id)

    def turn_finished(
        self,
        session: Session,
        record: TurnRecord,
        ready_ns: int,
        rewrite: list[RewriteItem] | None,
    ) -> None:
        """Record a finished turn: only the assistant message it appended, and what the
        context policy changed in the history before it (``rewrite``, a delta).

        Raises:
            LeaseLost: another worker took the session's lease: it stops here (its tools
                do not run) — it used to go on, calling the model and running tools for
                the rest of its life, every record refused.
        """
        if self.lost and session.session_id in self.lost:
            raise LeaseLost(self.run_id, session.session_id)
        failed = record.failed_attempts
        self.retries += len(failed)
        self.store.write(
            TurnFinished(
                run_id=self.run_id,
                session_id=session.session_id,
                turn=record.index,
                attempt=self.attempt,
                message=session.messages[-1],
                rewrite=rewrite,
                ready_ns=ready_ns,
                trace=record.trace,
                metrics=record.metrics,
                prompt=record.prompt,
                failed_attempts=len(failed),
                # Redacted here too: an AgentflowError masks the message it is built with, not
                # what a custom transport's subclass adds in __str__ (failures are rare).
                failures=tuple(redact(f"{f.replica}: {f.error!s}") for f in failed)
                if failed
                else (),
            )
        )

    def tool_finished(
        self,
        session: Session,
        turn: int,
        call: ToolCall,
        output: str,
        is_error: bool,
        duration_s: float,
        truncated_chars: int,
    ) -> None:
        """Record a tool's result, before it is appended to the conversation.

        Raises:
            LeaseLost: another worker took the session's lease (see
                :meth:`turn_finished`): its other tools are cancelled, no turn follows.
        """
        if self.lost and session.session_id in self.lost:
            raise LeaseLost(self.run_id, session.session_id)
        self.store.write(
            ToolFinished(
                run_id=self.run_id,
                session_id=session.session_id,
                turn=turn,
                call=call,
                output=output,
                is_error=is_error,
                duration_s=duration_s,
                truncated_chars=truncated_chars,
            )
        )

    def session_ended(self, session: Session, result: SessionResult) -> None:
        """Record how the session ended."""
        self.store.write(
            SessionEnded(
                run_id=self.run_id,
                session_id=session.session_id,
                status=result.status,
                final_output=result.final_output,
                # Redacted, as the JSON report is: a custom transport's RuntimeError may
                # quote a registered key (once per session end, never per token).
                error=None if result.error is None else error_line(result.error),
                turns=len(result.turns),
            )
        )
        if self._calibrators:
            cal = calibrator_of(session.agent)
            tracked = self._calibrators.get(id(cal))
            now = time.monotonic()
            # At most once per POLICY_EVERY_S per calibrator: its state is a few KB and
            # ~0.1 ms to build, and many sessions may end within a second.
            if tracked is not None and now - self._policy_saved.get(id(cal), -1e9) >= (
                POLICY_EVERY_S
            ):
                self._policy_saved[id(cal)] = now
                self._policy_state(tracked)
        if self.on_session_end is not None:
            self.on_session_end(session.session_id)


class LeaseKeeper:
    """Holds the leases of one attempt's sessions: renews them at every tick of
    ``ticker`` (a third of their time to live, in real time) while the run goes, and
    gives them back when it ends."""

    def __init__(self, store: Store, run_id: str, ttl_s: float, ticker: Ticker) -> None:
        self.store = store
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.ticker = ticker
        self.owner = LeaseOwner()
        self._task: asyncio.Task[None] | None = None
        #: Sessions whose lease this attempt holds (as of the last claim or renewal).
        self.held: set[str] = set()
        #: Sessions whose lease was lost (taken by another worker after expiring): the
        #: recorder stops them (it shares this set: ``DurableRun``).
        self.lost: set[str] = set()

    async def claim(self, session_ids: Sequence[str]) -> list[str]:
        """Take the free leases among ``session_ids``; renew them from now on."""
        got = await self.store.claim(self.run_id, session_ids, self.owner, self.ttl_s)
        self.held.update(got)
        self.lost.difference_update(got)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renew())
        return got

    async def _renew(self) -> None:
        while True:
            await self.ticker.wait()
            try:
                still = set(await self.store.renew(self.run_id, self.owner, self.ttl_s))
            except StoreError as exc:
                _log.warning("store.renew_failed", run_id=self.run_id, error=str(exc))
                continue
            lost = self.held - still
            if lost:
                _log.warning("store.leases_lost", run_id=self.run_id, sessions=sorted(lost))
                self.lost |= lost
                self.held -= lost

    async def release_some(self, session_ids: Sequence[str]) -> None:
        """Give back the leases of ``session_ids`` (their sessions ended here), once
        what was recorded about them is committed: should the store refuse (it cannot
        commit that now), they stay held, and renewed."""
        await self.store.release(self.run_id, self.owner, session_ids)
        self.held.difference_update(session_ids)

    async def release(self) -> None:
        """Stop renewing and give every lease back.

        Should the store refuse (records written before wait to be committed: given
        back, another worker would claim those sessions, see none of those records and
        run their tools again) and keep the leases held (PostgreSQL's; SQLite gives its run
        lock back all the same), they are renewed past the attempt's end — by a task of
        their own, every third of ``ttl_s`` in real time — and their release
        is asked again after each renewal (which tries the held records again), until it
        goes through or the store is closed (its ``aclose`` cancels that task). (They used
        to stop being renewed: another worker took them over once they expired, and ran
        every tool call again.)

        Raises:
            StoreError: the store refused (the leases are kept, as above).
        """
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.store.release(self.run_id, self.owner)
        except StoreError:
            keep_until_closed = _keep_until_closed(self.store)
            if keep_until_closed is not None and not _closed(self.store):
                keep_until_closed(asyncio.get_running_loop().create_task(self._keep()))
            raise
        self.held.clear()

    async def _keep(self) -> None:
        """Renew the leases a refused release kept, and ask for their release again after
        each renewal, until it goes through (or the store is closed)."""
        ticker = Ticker(self.ttl_s / 3)
        _log.warning("store.leases_kept", run_id=self.run_id, sessions=len(self.held))
        try:
            # At once first: the refused release may have waited out a commit's try.
            with contextlib.suppress(StoreError):
                await self.store.renew(self.run_id, self.owner, self.ttl_s)
            while not _closed(self.store):
                await ticker.wait()
                try:
                    await self.store.renew(self.run_id, self.owner, self.ttl_s)
                    await self.store.release(self.run_id, self.owner)
                except StoreError as exc:
                    if _closed(self.store):  # (closed meanwhile: nothing failed)
                        return
                    _log.warning("store.release_failed", run_id=self.run_id, error=str(exc))
                    continue
                self.held.clear()
                _log.info("store.leases_released", run_id=self.run_id)
                return
        finally:
            ticker.stop()


def _keep_until_closed(store: Store) -> Callable[[asyncio.Task[None]], None] | None:
    """How ``store`` takes the task renewing the leases a refused release kept — it holds
    it, and cancels it as it closes — if its refused release keeps them held: PostgreSQL's,
    while records written before wait to be committed. Not SQLite's, which gives its run
    lock back even as its release raises (the database locked, the disk full); nor a store
    that does not say (such a task would never learn that it closed)."""
    hook = getattr(store, "_keep_until_closed", None)
    return hook if callable(hook) else None


def _closed(store: Store) -> bool:
    """Whether ``store`` was closed (a store that does not say is taken to be open)."""
    return bool(getattr(store, "_closed", False))
