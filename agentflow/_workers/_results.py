"""How a sharded run's sessions end on the parent: the workers' counts merged, the
sessions no worker finished failed (or cancelled) here, and the cancel path that stops
the workers first."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from agentflow._errors import WorkerError
from agentflow._event_bus import EventBus
from agentflow._events import ErrorEvent, SessionEndEvent
from agentflow._session import Session, SessionResult
from agentflow._workers._broker import WorkerHandle

if TYPE_CHECKING:
    from agentflow._workers._open_turns import OpenTurns
    from agentflow._workers._parent import Launcher
    from agentflow.store._recorder import Recorder

__all__ = ["fail_missing", "merge_replicas", "stop_workers"]


def merge_replicas(per_worker: list[list[Any]], cls: Any, cap: int | None = None) -> list[Any]:
    """The workers' per-replica counts, summed by replica name (``cls``: ReplicaStats).
    A peak in flight is the sum of the workers' (an upper bound: theirs need not have
    coincided), at most ``cap``, the fleet's own bound."""
    merged: dict[str, Any] = {}
    for stats in per_worker:
        for r in stats:
            m = merged.get(r.name)
            merged[r.name] = (
                r
                if m is None
                else cls(
                    name=r.name,
                    served=m.served + r.served,
                    failures=m.failures + r.failures,
                    peak_in_flight=m.peak_in_flight + r.peak_in_flight,
                    breaker_opened=m.breaker_opened + r.breaker_opened,
                    breaker_held=m.breaker_held + r.breaker_held,
                    rejected=m.rejected + r.rejected,
                )
            )
    out = list(merged.values())
    if cap is not None:
        out = [
            r if r.peak_in_flight <= cap else dataclasses.replace(r, peak_in_flight=cap)
            for r in out
        ]
    return out


def fail_missing(
    sessions: list[Session],
    results: list[SessionResult | None],
    workers: list[WorkerHandle],
    bus: EventBus,
    status: str,
    launcher: Launcher,
    recorder: Recorder | None = None,
    recorded: Collection[str] = (),
    open_turns: OpenTurns | None = None,
) -> None:
    """Sessions with no result (their worker died, or the run was cancelled first) end
    here: their result, their events and, with a store (``recorder``), their recorded
    end with the error — as a session that ends so in one process is recorded, unless
    its worker recorded its end already (in ``recorded``: it died after sending that
    record, before its session's end event; the stored end is the true one)."""
    for w in workers:
        for k in w.sessions:
            if results[k] is not None:
                continue
            s = sessions[k]
            if status == "cancelled":
                error: BaseException = asyncio.CancelledError()
            else:
                if w.hung and not w.crash:  # the watchdog killed it: that comes first
                    what, code = launcher.ended(w, w.hung)
                    text = f"{what} before session {s.session_id!r} ended: {w.hung_why}"
                else:
                    what, code = launcher.ended(w)
                    said = w.crash or w.lost_why
                    why = f": {said}" if said else _unheard(w, code)
                    text = f"{what} before session {s.session_id!r} did{why}"
                error = WorkerError(text, worker=w.index, exitcode=code)
            result = SessionResult(
                session_id=s.session_id,
                agent=s.agent.name,
                status="cancelled" if status == "cancelled" else "error",
                final_output=None,
                messages=list(s.messages),
                turns=list(s.turns),
                error=error,
                metadata=s.metadata,
            )
            results[k] = s.result = result
            if recorder is not None and s.session_id not in recorded:  # written here
                recorder.session_ended(s, result)
            if status != "cancelled":
                turn = None
                if open_turns is not None:  # what it had streamed of a turn is retracted
                    turn = open_turns.turn(s.session_id)
                    discarded = open_turns.discard(s.session_id, error, retried=False)
                    if discarded is not None:
                        bus.emit(discarded)
                bus.emit(
                    ErrorEvent(
                        agent=s.agent.name,
                        session_id=s.session_id,
                        turn=turn,
                        where="session",
                        error=error,
                    )
                )
            bus.emit(SessionEndEvent(agent=s.agent.name, session_id=s.session_id, result=result))


def _unheard(w: WorkerHandle, code: int | None) -> str:
    """The hint for a worker process that exited with an error (a positive exit code:
    not killed by a signal) before its first message: most likely while ``spawn``
    imported the main module — a script without the ``__main__`` guard starts its run
    again there, which fails with a traceback on the worker's stderr, never sent here.
    (A Ray actor has no exit code: no hint.)"""
    if w.heard is not None or code is None or code <= 0:
        return ""
    return (
        ": the parent never heard from it, so it most likely ended before it loaded its "
        "sessions: see its stderr; is the main module guarded by "
        '`if __name__ == "__main__":`?'
    )


async def stop_workers(workers: list[WorkerHandle], timeout_s: float) -> None:
    """Cancel every worker's run and wait (at most ``timeout_s``) for its partial results."""
    for w in workers:
        if w.alive:
            with contextlib.suppress(OSError, ValueError):
                w.send(("cancel",))
    # Only a worker that is heard can say it stopped (one cancelled while it started
    # is not: its sessions end cancelled here).
    waits = [
        w.done
        for w in workers
        if w.done is not None
        and not w.done.done()
        and (w.reader is not None or w.listener is not None)
    ]
    if waits:
        await asyncio.wait(waits, timeout=timeout_s)
