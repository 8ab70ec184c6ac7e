"""Workers sharing one run: which sessions a resumed attempt runs, decided as it goes.

A resumed attempt does not take every unfinished session when it starts (the first
worker would get them all). Each session passes a :class:`SessionGate` first: it waits
for a place in the attempt's window (at most ``window`` sessions held at once), then
claims its lease. With the lease, the session is read again from the store — another
worker may have advanced it since this attempt started — and run. Without it (another
live worker holds it), it leaves the window and tries again at every tick, until it
gets the lease: its holder released it (then it is usually done, and is returned as
stored) or died (then its lease expires and this worker takes the session over where
the store says it stopped). A session this attempt runs again is marked ``pending`` in
the store first, so that an end recorded later is known to be new. So two workers
started on one run split it between them,
each ends when the whole run has ended, and a session is run by one worker at a time.

Claims and reads of sessions that pass the gate at the same moment go to the store
together (one :meth:`Store.claim`, one :meth:`Store.load`).

Leases are real time, whatever the event loop's clock: :class:`Ticker` wakes the lease
renewals and the waiting sessions from a thread every ``period_s`` real seconds, so a
fleet on a :class:`~agentflow.embedded.VirtualTimeLoop` renews its leases in time (a
loop timer would jump ahead with virtual time, or stall behind it).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow.store._records import SessionEnded, StoredRun, StoredSession
from agentflow.store._replay import replay_tools
from agentflow.store._resume import plan_resume, stored_result

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow.store._recorder import LeaseKeeper

__all__ = ["SessionGate", "Ticker"]

_log = get_logger("agentflow.store")

#: Claims (one a tick: a third of a lease's time to live) the store may refuse in a row
#: before the gate gives up: then it is taken to be broken, not passing through an
#: outage (5 minutes with the default ``lease_ttl_s`` of 60 s).
CLAIM_TRIES = 15


class Ticker:
    """Wakes :meth:`wait`-ers every ``period_s`` seconds of real time (a daemon thread
    that calls into the loop), or at :meth:`stop`."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._waiters: list[asyncio.Future[None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticked = threading.Condition()

    def start(self) -> None:
        """Start ticking (idempotent); call from the event loop."""
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._main, name="agentflow-leases", daemon=True)
            self._thread.start()

    async def wait(self) -> None:
        """Return at the next tick."""
        self.start()
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def block(self) -> None:
        """Block the calling thread until the next tick (at most ``period_s``)."""
        with self._ticked:
            self._ticked.wait(self.period_s)

    def stop(self) -> None:
        """Stop ticking and wake every waiter."""
        self._stop.set()
        self._fire()
        with self._ticked:
            self._ticked.notify_all()

    def _main(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stop.wait(self.period_s):
            with self._ticked:
                self._ticked.notify_all()
            try:
                loop.call_soon_threadsafe(self._fire)
            except RuntimeError:  # the loop is closed
                return

    def _fire(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class SessionGate:
    """Decides, session by session, whether this attempt runs it (see the module).

    Args:
        leases: the attempt's lease keeper (its store, run and owner).
        agents: the agents to rebuild sessions with.
        attempt: this attempt's number.
        started: per session id, its ``(status, turns, ended_attempt)`` when this
            attempt started (:attr:`StoredSession.ended_attempt`: ``None`` where the
            store keeps none): a session that has ended since (elsewhere) is returned
            as stored, not rerun.
        window: the most sessions this attempt holds at once.
    """

    def __init__(
        self,
        leases: LeaseKeeper,
        agents: Iterable[Agent] | Mapping[str, Agent],
        attempt: int,
        started: Mapping[str, tuple[str, int, int | None]],
        window: int,
        ticker: Ticker,
    ) -> None:
        self.leases = leases
        self.agents = agents
        self.attempt = attempt
        self.started = dict(started)
        self.ticker = ticker
        self._window = asyncio.Semaphore(window)
        self._asked: dict[str, asyncio.Future[StoredRun | None]] = {}
        #: Sessions that waited for another worker at least once.
        self.waited: set[str] = set()
        self._running = 0
        self._holding = False
        #: Claims the store refused in a row (see :data:`CLAIM_TRIES`).
        self.failures = 0
        self.tries = CLAIM_TRIES
        #: Per session id, the result of the session this attempt ran (rebuilt from the
        #: store): it stands for the task's when a callback cancelled that task. (Not
        #: the session: thousands of rebuilt sessions stayed alive to the run's end.)
        self.ran: dict[str, SessionResult | None] = {}

    async def run(
        self, session: Session, start: Callable[[Session], Awaitable[SessionResult]]
    ) -> SessionResult:
        """``start`` the session here once its lease is held, or return its stored
        result when another worker ended it."""
        sid = session.session_id
        while True:
            async with self._window:
                run = await self._take(sid)
                if run is not None:
                    entry = self._entry(run, sid)
                    if not isinstance(entry, Session):
                        await self._release(sid)
                        return entry
                    self._running += 1
                    try:
                        entry._prepare = functools.partial(replay_tools, _stored(run, sid), entry)
                        result = await start(entry)
                    finally:
                        self._running -= 1
                        self.ran[sid] = entry.result
                    # Its end is recorded: let a worker waiting for it see that now.
                    await self._release(sid)
                    return result
            self.waited.add(sid)
            self._hold_if_idle()
            await self.ticker.wait()

    async def admit(self, session: Session) -> Session | SessionResult:
        """Decide ``session`` now rather than as it starts (``Fleet(workers=N).resume``:
        the parent hands every session it holds to a worker at once): once its lease is
        held, the session rebuilt from the store as it is now, to run; or its stored
        result, when another process ended it meanwhile (its lease then given back).
        Waits, tick by tick, while another live process holds it."""
        sid = session.session_id
        while True:
            run = await self._take(sid)
            if run is not None:
                entry = self._entry(run, sid)
                if isinstance(entry, Session):
                    entry._prepare = functools.partial(replay_tools, _stored(run, sid), entry)
                else:
                    await self._release(sid)
                return entry
            self.waited.add(sid)
            await self.ticker.wait()

    def _hold_if_idle(self) -> None:
        """While nothing runs here but sessions wait for another worker, keep the loop
        on real time until the next tick: a thread blocks (an executor job), which a
        :class:`~agentflow.embedded.VirtualTimeLoop` waits for instead of jumping its
        clock from idle timer to idle timer in a busy loop. On an ordinary loop this is
        one idle thread."""
        if self._running or self._holding:
            return
        self._holding = True
        job = asyncio.get_running_loop().run_in_executor(None, self.ticker.block)
        job.add_done_callback(self._held)

    def _held(self, _: object) -> None:
        self._holding = False

    def _entry(self, run: StoredRun, sid: str) -> Session | SessionResult:
        stored = next((s for s in run.sessions if s.session_id == sid), None)
        if stored is None:
            raise StoreError(f"run {run.run_id!r}: session {sid!r} is no longer in the store")
        now = (stored.status, len(stored.turns), stored.ended_attempt)
        ended_elsewhere = stored.status != "pending" and ended_since(self.started.get(sid), now)
        if stored.done or ended_elsewhere:
            return stored_result(run, stored, self.attempt)
        plan = plan_resume(run, self.agents, self.attempt)
        entry = plan.entries[0]
        for done in plan.newly_done:
            self._ended(run.run_id, sid, done.status, done.final_output, len(done.turns))
        if isinstance(entry, Session) and stored.status != "pending":
            # Running again: should this worker die, its successor must continue it
            # rather than take the old end (error, cancelled) for one reached elsewhere.
            self._ended(run.run_id, sid, "pending", None, len(stored.turns))
        return entry

    def _ended(self, run_id: str, sid: str, status: str, final: str | None, turns: int) -> None:
        self.leases.store.write(
            SessionEnded(
                run_id=run_id, session_id=sid, status=status, final_output=final, error=None,
                turns=turns,
            )
        )  # fmt: skip

    async def _take(self, sid: str) -> StoredRun | None:
        """Claim ``sid`` (with whatever else is asked now); the stored run holding only
        it when its lease is now this attempt's, else ``None`` — also when the store
        cannot be asked now (a lost connection): the next tick asks again, as a fresh
        run rides out such an outage, rather than the whole attempt failing.

        Raises:
            StoreError: the store refused :attr:`tries` claims in a row — a fault that
                lasts (a row it cannot read, a query it refuses) was asked about again
                at every tick, for ever.
        """
        fut: asyncio.Future[StoredRun | None] = asyncio.get_running_loop().create_future()
        if not self._asked:
            asyncio.get_running_loop().call_soon(self._go)
        self._asked[sid] = fut
        try:
            return await fut
        except StoreError as exc:
            if self.failures >= self.tries:
                raise  # (logged once, by the claim)
            _log.warning("store.claim_failed", run_id=self.leases.run_id, error=str(exc))
            return None

    async def _release(self, sid: str) -> None:
        """Give ``sid``'s lease back; should the store refuse now, the attempt's end
        gives it back (or it expires), as a fresh run's do."""
        try:
            await self.leases.release_some([sid])
        except StoreError as exc:
            _log.warning("store.release_failed", run_id=self.leases.run_id, error=str(exc))

    def _go(self) -> None:
        asked, self._asked = self._asked, {}
        task = asyncio.get_running_loop().create_task(self._claim(asked))
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

    async def _claim(self, asked: dict[str, asyncio.Future[StoredRun | None]]) -> None:
        try:
            got = await self.leases.claim(list(asked))
            run = await self.leases.store.load(self.leases.run_id, got) if got else None
        except BaseException as exc:
            if isinstance(exc, StoreError):
                self.failures += 1
                if self.failures == self.tries:
                    _log.error(
                        "store.claims_given_up", run_id=self.leases.run_id, tries=self.tries,
                        error=str(exc),
                    )  # fmt: skip
            for fut in asked.values():
                if not fut.done():
                    fut.set_exception(exc)
            raise
        self.failures = 0
        held = set(got)
        for sid, fut in asked.items():
            if not fut.done():
                fut.set_result(_only(run, sid) if run is not None and sid in held else None)


def ended_since(
    started: tuple[str, int, int | None] | None, now: tuple[str, int, int | None]
) -> bool:
    """Whether a session, now ``(status, turns, ended_attempt)`` and not pending, ended
    since this attempt started (``started``; ``None``: it was not in the store then):
    its status, turns or — where the store keeps it (PostgreSQL) — the attempt its end
    was stamped with changed. (A session another worker ran again, failing again at the
    same turn, matched the status and turns of this attempt's start, and was run a third
    time here.) The stamps are compared only when both are there: a store that had no
    ``ended_attempt`` column as this attempt started may have one now (added at a
    reconnect), and an end from before the attempt was taken for a new one. A row from
    before the column has ``-1`` in a store with it, not ``None``: re-run and ended
    again elsewhere, it has a stamp now, and counts as changed."""
    if started is None:
        return True
    if started[2] is None or now[2] is None:
        return started[:2] != now[:2]
    return started != now


def _stored(run: StoredRun, sid: str) -> StoredSession:
    return next(s for s in run.sessions if s.session_id == sid)


def _only(run: StoredRun, sid: str) -> StoredRun:
    return StoredRun(
        run_id=run.run_id,
        config=run.config,
        status=run.status,
        attempts=run.attempts,
        agents=run.agents,
        sessions=[s for s in run.sessions if s.session_id == sid],
        created_wall_ns=run.created_wall_ns,
    )
