"""Re-running a lost worker's sessions (the parent's side of a sharded run): on a new
worker, from what the store recorded of them (or from their start, on Ray), each at most
:data:`MAX_RERUNS` times — the tokens the lost worker had streamed of an unfinished turn
retracted first (:mod:`._open_turns`)."""

from __future__ import annotations

import pickle
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from agentflow._errors import WorkerError
from agentflow._event_bus import EventBus
from agentflow._events import SessionEndEvent
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._open_turns import OpenTurns

if TYPE_CHECKING:
    from agentflow._workers._parent import Launcher
    from agentflow.store._durable import DurableRun

__all__ = ["MAX_RERUNS", "Reruns"]

_log = get_logger("agentflow.workers")

#: How many times a session whose worker was lost is run again before it fails.
MAX_RERUNS = 2


class Reruns:
    """What :class:`~agentflow._workers._sharded.ShardedRun` does with a lost worker's
    sessions (its base class: the run's state is the subclass's)."""

    sessions: list[Session]
    results: list[SessionResult | None]
    reruns: list[int]
    blobs: list[bytes]
    bus: EventBus
    launcher: Launcher
    durable: DurableRun | None
    cancelling: bool
    open_turns: OpenTurns | None

    def spawn(self, shard: list[int]) -> WorkerHandle:
        """Create a worker for ``shard`` (the run's)."""
        raise NotImplementedError

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of the run's (the run's)."""
        raise NotImplementedError

    def rerun(self, w: WorkerHandle) -> bool:
        """Run lost ``w``'s unfinished sessions again (each at most :data:`MAX_RERUNS`
        times) on a new worker: on Ray; with a store, on any launcher (from their recorded
        turns, not from their start). Whether ``w``'s end waits for the store (it is
        resolved once their new worker is registered)."""
        durable = self.durable
        rerun = self.launcher.rerun_lost or (durable is not None and not w.crash)
        if not rerun or self.cancelling:
            return False
        again = [k for k in w.sessions if self.results[k] is None and self.reruns[k] < MAX_RERUNS]
        if not again:
            return False
        # Registered before this one's done resolves, so the run waits for it too.
        what, _ = self.launcher.ended(w)
        _log.warning(
            "workers.rerun",
            lost=what,
            sessions=[self.sessions[k].session_id for k in again],
        )
        moved = set(again)
        w.sessions = [k for k in w.sessions if k not in moved]
        for k in again:
            self.reruns[k] += 1
        if durable is not None:  # from where the store says they stopped
            self._background(self.from_store(w, again))
            return True
        for k in again:  # (from their start: whatever they had streamed is retracted)
            self.retract(w, k, ended=0)
        self.spawn(again)
        return False

    async def from_store(self, w: WorkerHandle, again: list[int]) -> None:
        """Rebuild ``again`` (lost with ``w``) from the store, then run them on a new
        worker; one whose end was recorded ends here. Should the store fail, they
        fail with ``w``'s WorkerError."""
        assert self.durable is not None
        try:
            try:
                entries = await self.durable.reload([self.sessions[k] for k in again])
                rerun: list[int] = []
                for k, entry in zip(again, entries, strict=True):
                    if isinstance(entry, Session):
                        self.blobs[k] = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
                        self.retract(w, k, ended=len(entry.turns))
                        rerun.append(k)
                    else:
                        self.finish_here(k, entry)
            except Exception as exc:
                _log.error("workers.rerun_from_store_failed", error=repr(exc))
                w.crash = w.crash or f"its sessions could not be read back from the store: {exc!r}"
                w.sessions.extend(again)
                return
            if rerun:
                self.spawn(rerun)
        finally:
            if w.done is not None and not w.done.done():
                w.done.set_result({})

    def retract(self, w: WorkerHandle, k: int, *, ended: int) -> None:
        """Session ``k`` runs again after lost ``w`` had streamed part of a turn: that
        attempt is discarded (:class:`AttemptDiscardedEvent`, ``retried``) before the
        turn's tokens come again — unless that turn is among the ``ended`` turns its
        new run starts after (it was recorded: what was streamed of it stands)."""
        open_turns = self.open_turns
        if open_turns is None:
            return
        sid = self.sessions[k].session_id
        turn = open_turns.turn(sid)
        if turn is None or turn < ended:
            open_turns.forget(sid)
            return
        what, code = self.launcher.ended(w)
        error = WorkerError(
            f"{what} while session {sid!r} streamed turn {turn}", worker=w.index, exitcode=code
        )
        event = open_turns.discard(sid, error, retried=True)
        if event is not None:
            self.bus.emit(event)

    def finish_here(self, k: int, result: SessionResult) -> None:
        """Session ``k`` ended before its worker was lost (the store says so): it ends
        with that result here."""
        self.results[k] = result
        s = self.sessions[k]
        if self.open_turns is not None:
            self.open_turns.forget(s.session_id)
        s.result, s.messages, s.turns = result, result.messages, result.turns
        self.bus.emit(SessionEndEvent(agent=s.agent.name, session_id=s.session_id, result=result))
