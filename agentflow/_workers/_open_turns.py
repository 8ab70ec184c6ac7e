"""The attempt each session's worker is streaming — so a lost worker's half-streamed
turn is retracted (:class:`AttemptDiscardedEvent`) as an attempt that fails in one
process is.

A worker forwards its sessions' events to the parent, which emits them on the run's bus
as they arrive. The tokens of an attempt that then dies with its worker were delivered;
nothing in the worker is left to say that they no longer count. So, when tokens are
read, the worker tells the parent with each batch of events it sends the state of its
sessions' attempts that changed since its last batch (:class:`OpenAttempts`, from the
counts each turn's token sink keeps for the worker's own discards): per session, the
attempt streaming and its token events so far — as of the batch, so what the parent has
describes exactly the tokens it was forwarded — or ``None`` once the turn ended or the
attempt was discarded. The parent keeps each session's latest (:class:`OpenTurns`, one
dict update per batch: nothing per token) and makes the discard from it when the worker
is lost: before the turn runs again (a store, or Ray, re-runs the session) or before the
session's :class:`ErrorEvent`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from agentflow._events import AttemptDiscardedEvent, Event, SessionEndEvent, TurnEndEvent

if TYPE_CHECKING:
    from agentflow._turn_events import _TokenSink

__all__ = ["Attempt", "OpenAttempts", "OpenTurns"]

#: An attempt streaming: (agent, turn, attempt, deltas, chars, content_chars).
Attempt = tuple[str, int, int, int, int, int]


class OpenAttempts:
    """A worker's sessions' open attempts (the :data:`~agentflow._turn_events.WATCH` of
    its run), and the callback that hears their turns end.

    ``wake`` is called when a turn's end or discard changed what the parent should know
    with no token forwarded (the forwarder's batch timer: the change goes with its next
    batch, which :meth:`take` fills in)."""

    #: What the worker fleet reads for it (as a callback).
    event_types = frozenset({"turn_end", "attempt_discarded", "session_end"})

    __slots__ = ("_changed", "_open", "_sent", "wake")

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self._open: dict[str, _TokenSink] = {}  # per session, its turn's sink
        # Sessions whose state changed since the last take: their sink, or None (ended).
        self._changed: dict[str, _TokenSink | None] = {}
        self._sent: set[str] = set()  # sessions whose last state sent was an attempt

    def opened(self, sink: _TokenSink) -> None:
        self._open[sink.session_id] = sink

    def streaming(self, sink: _TokenSink) -> None:
        self._changed[sink.session_id] = sink

    def __call__(self, event: Event) -> None:
        """A turn ended, an attempt was discarded, or a session ended (in the worker)."""
        if isinstance(event, AttemptDiscardedEvent):  # its sink's counts are reset
            sid = event.session_id
            sink = self._open.get(sid)
            if sink is None or sink.turn != event.turn:
                return
            self._changed[sid] = sink
        elif isinstance(event, TurnEndEvent | SessionEndEvent):
            sid = event.session_id
            sink = self._open.get(sid)
            if sink is None or (isinstance(event, TurnEndEvent) and sink.turn != event.turn):
                return
            del self._open[sid]
            self._changed[sid] = None
        else:
            return
        if sid in self._sent:
            self.wake()

    def take(self) -> dict[str, Attempt | None] | None:
        """What changed since the last take (``None``: nothing), for the batch being sent:
        the counts of tokens forwarded so far, in it or before."""
        if not self._changed:
            return None
        out: dict[str, Attempt | None] = {}
        sent = self._sent
        for sid, sink in self._changed.items():
            if sink is not None:
                sink.marked = False  # its next token tells again
                if sink.deltas:
                    out[sid] = (
                        sink.agent,
                        sink.turn,
                        sink.attempt,
                        sink.deltas,
                        sink.chars,
                        sink.content_chars,
                    )
                    sent.add(sid)
                    continue
            if sid in sent:  # nothing of it is streaming now
                out[sid] = None
                sent.discard(sid)
        self._changed = {}
        return out or None


class OpenTurns:
    """Per session, the attempt its worker was streaming as of its last batch (see the
    module): the parent's side."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, Attempt | None] = {}

    def update(self, changed: Mapping[str, Attempt | None]) -> None:
        """A worker's batch came with ``changed`` (:meth:`OpenAttempts.take`)."""
        self._open.update(changed)

    def turn(self, session_id: str) -> int | None:
        """The turn ``session_id``'s worker was streaming when last heard of (``None``:
        no token of an unfinished turn was forwarded)."""
        o = self._open.get(session_id)
        return o[1] if o is not None else None

    def forget(self, session_id: str) -> None:
        """``session_id``'s streamed turn stands (it was recorded as ended)."""
        self._open.pop(session_id, None)

    def discard(
        self, session_id: str, error: BaseException, *, retried: bool
    ) -> AttemptDiscardedEvent | None:
        """The discard of what ``session_id``'s lost worker had streamed of its turn
        (``None``: nothing was forwarded since its last turn ended), forgotten here."""
        o = self._open.pop(session_id, None)
        if o is None:
            return None
        agent, turn, attempt, deltas, chars, content_chars = o
        return AttemptDiscardedEvent(
            agent=agent,
            session_id=session_id,
            turn=turn,
            attempt=attempt,
            deltas=deltas,
            chars=chars,
            content_chars=content_chars,
            retried=retried,
            error=error,
        )
