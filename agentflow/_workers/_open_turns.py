"""The attempt each session's worker was streaming, as the parent saw its events — so a
lost worker's half-streamed turn is retracted (:class:`AttemptDiscardedEvent`) as an
attempt that fails in one process is.

A worker forwards its sessions' events to the parent, which emits them on the run's bus
as they arrive. The tokens of an attempt that then dies with its worker were delivered;
nothing in the worker is left to say that they no longer count. :class:`OpenTurns` counts
the token events forwarded for each session since its last turn ended (or attempt was
discarded), and makes the discard for them when the worker is lost: before the turn runs
again (a store, or Ray, re-runs the session) or before the session's :class:`ErrorEvent`.
"""

from __future__ import annotations

from agentflow._events import (
    AttemptDiscardedEvent,
    Event,
    SessionEndEvent,
    TokenEvent,
    TurnEndEvent,
)

__all__ = ["OpenTurns"]


class _Open:
    """One session's attempt under way: its turn, its number, its token events so far."""

    __slots__ = ("agent", "attempt", "chars", "content_chars", "deltas", "turn")

    def __init__(self, agent: str, turn: int, attempt: int) -> None:
        self.agent, self.turn, self.attempt = agent, turn, attempt
        self.deltas = self.chars = self.content_chars = 0


class OpenTurns:
    """Per session, the attempt its worker is streaming (see the module)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}

    def see(self, event: Event) -> None:
        """``event`` was forwarded by a worker (called for each, before it is emitted)."""
        if isinstance(event, TokenEvent):
            sid = event.session_id
            o = self._open.get(sid)
            if o is None or o.turn != event.turn:
                o = self._open[sid] = _Open(event.agent, event.turn, 0)
            n = len(event.text)
            o.deltas += 1
            o.chars += n
            if event.kind == "content":
                o.content_chars += n
        elif isinstance(event, AttemptDiscardedEvent):
            # The next attempt of the same turn starts with nothing delivered.
            self._open[event.session_id] = _Open(event.agent, event.turn, event.attempt + 1)
        elif isinstance(event, TurnEndEvent | SessionEndEvent):
            self._open.pop(event.session_id, None)

    def turn(self, session_id: str) -> int | None:
        """The turn ``session_id``'s worker was streaming when last heard of (``None``:
        no token of an unfinished turn was forwarded)."""
        o = self._open.get(session_id)
        return o.turn if o is not None else None

    def forget(self, session_id: str) -> None:
        """``session_id``'s streamed turn stands (it was recorded as ended)."""
        self._open.pop(session_id, None)

    def discard(
        self, session_id: str, error: BaseException, *, retried: bool
    ) -> AttemptDiscardedEvent | None:
        """The discard of what ``session_id``'s lost worker had streamed of its turn
        (``None``: nothing was forwarded since its last turn ended), forgotten here."""
        o = self._open.pop(session_id, None)
        if o is None or o.deltas == 0:
            return None
        return AttemptDiscardedEvent(
            agent=o.agent,
            session_id=session_id,
            turn=o.turn,
            attempt=o.attempt,
            deltas=o.deltas,
            chars=o.chars,
            content_chars=o.content_chars,
            retried=retried,
            error=error,
        )
