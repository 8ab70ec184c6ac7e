"""One model turn of a :class:`~agentflow.Session`: the context links before it, its
ticket, the request streamed through the fleet's turn runner (tokens to the bus), the
assistant message appended, the :class:`TurnRecord`, the run store told, the
:class:`TurnEndEvent`; and the cheap prompt estimate a ticket is charged with when no
context link counts. The turn loop that calls it is in ``_session.py``; the tool calls
that follow a turn, in ``_session_tools.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._call_ids import unique_call_ids
from agentflow._content_parts import CHARS_PER_TOKEN, IMAGE_PARTS, IMAGE_TOKENS
from agentflow._events import RetryEvent, TurnEndEvent
from agentflow._logging import dropped, get_logger
from agentflow._metrics import turn_metrics
from agentflow._rewrite import rewrite_delta
from agentflow._session_types import TurnRecord
from agentflow._turn_events import TurnEvents
from agentflow.sched import Grant, Ticket

if TYPE_CHECKING:
    from agentflow._event_bus import EventBus
    from agentflow._session import Session
    from agentflow._trace import TurnTrace
    from agentflow.sched import FailedAttempt, TurnRunner
    from agentflow.transport._request import ChatRequest
    from agentflow.typing import Clock

__all__ = ["DEFAULT_MAX_OUTPUT_TOKENS", "model_turn", "rough_estimate", "turn_ticket"]

#: Output tokens a turn is charged for by token limits when its agent sets no max_tokens.
DEFAULT_MAX_OUTPUT_TOKENS = 1024

_log = get_logger("agentflow.session")


async def model_turn(
    session: Session,
    index: int,
    runner: TurnRunner,
    bus: EventBus,
    clock: Clock,
    first: Grant | BaseException | None = None,
) -> TurnTrace:
    """Run ``session``'s turn ``index`` and record it; its trace. ``first``: the grant of
    a turn the fleet queued before the session started (or what failed it)."""
    agent = session.agent
    ctx = session._context
    log = session._log
    prompt = rewrite = None
    try:
        if ctx is not None:
            before = list(session.messages) if log is not None else None
            prompt = await ctx.before_turn(
                index,
                session.messages,
                agent.tool_specs,
                _completer(session, index, runner, bus, clock),
            )
            if before is not None and not _same_items(before, session.messages):
                # The policy rewrote history: recorded as what changed against ``before``
                # (agentflow/_rewrite.py), not the whole history again on every such turn.
                rewrite = rewrite_delta(before, session.messages)
        if log is not None:
            log.turn_starting(session, index)  # (a run store's lease lost: stop before sending)
        events = TurnEvents(bus, agent.name, session.session_id, index)
        if isinstance(first, Grant):  # queued by the fleet before the session started
            ticket = first.ticket
            ready = ticket.ready_ns
        else:
            # Ready now, its prompt built: a compaction the policy just ran (a model
            # request of its own, on CompactionEvent.trace) is not queue wait.
            ready = clock()
            estimate = prompt.estimated_tokens if prompt else rough_estimate(session)
            ticket = session._ticket(index, ready, estimate)
        request = session._request
        if request is None or session._request_per_turn or request.messages is not session.messages:
            # Built once: it holds the live list of messages, and the router's
            # session header and cache key do not change from turn to turn.
            request = session._request = runner.routed(ticket, session.request())
    except BaseException:
        if isinstance(first, Grant):
            # Queued: the session's task started holding its first turn's slot, which
            # only the send gives back. A failure before it (the run store's lease lost)
            # used to keep that slot forever: with max_concurrency=1 the fleet hung.
            runner.scheduler.release(first, used_tokens=None, ok=None)
        raise
    try:
        trace, failed = await runner.send(ticket, request, events.sink, events.retry, first=first)
    except Exception as exc:
        # The last attempt failed: its tokens are void too. A turn that failed while
        # waiting for a slot (before any attempt, or before a retry) sent nothing new.
        if ticket.sent > events.attempts:
            events.discard(exc, retried=False)
        raise
    trace = unique_call_ids(session, index, trace)  # before anything sees its calls
    if ctx is not None:
        ctx.after_turn(index, trace)
    metrics = turn_metrics(trace, ready_ns=ready)
    debug = _log.debug  # (a no-op, structlog left unloaded, when nobody keeps the line)
    if debug is not dropped:
        debug(
            "turn.end",
            ttft_s=metrics.ttft_s,
            e2e_s=metrics.e2e_s,
            output_tokens=metrics.output_tokens,
            tool_calls=len(trace.tool_calls),
        )
    session.messages.append(trace.assistant_message())
    record = TurnRecord(index, metrics, trace, prompt, failed)
    session.turns.append(record)
    if log is not None:
        log.turn_finished(session, record, ready, rewrite)
    if bus.wants("turn_end"):
        bus.emit(
            TurnEndEvent(
                agent=session.agent.name,
                session_id=session.session_id,
                turn=index,
                metrics=metrics,
                trace=trace,
                prompt=prompt,
            )
        )
    return trace


def _completer(
    session: Session, index: int, runner: TurnRunner, bus: EventBus, clock: Clock
) -> Callable[[ChatRequest], Awaitable[TurnTrace]]:
    """A context policy's ``complete`` for turn ``index``: one extra model request
    through the same scheduler, limits and retries.

    Each retry of it is a :class:`RetryEvent` for turn ``index`` (before that turn is
    sent, and before the policy's own event, a :class:`CompactionEvent`, say), as the
    runner's ``retries`` (``FleetResult.retries``) count it: they used to be counted
    there but reported by no event, so a live ``FleetStats`` missed them. No
    :class:`AttemptDiscardedEvent` comes before it (the request streams no tokens to the
    callbacks), and the failed attempts are on no turn's ``failed_attempts``."""
    agent, session_id = session.agent.name, session.session_id

    def on_retry(_: Ticket, attempt: FailedAttempt) -> None:
        _log.info("context.request_retry", error=repr(attempt.error), wait_s=attempt.wait_s)
        bus.emit(RetryEvent(agent=agent, session_id=session_id, turn=index, attempt=attempt))

    async def complete(extra: ChatRequest) -> TurnTrace:
        tool_chars = len(msgspec.json.encode(extra.tools)) if extra.tools else 0
        estimate = _rough_tokens(extra.messages, tool_chars)
        ticket = session._ticket(index, clock(), estimate)
        trace, _ = await runner.send(ticket, extra, None, on_retry)
        return trace

    return complete


def turn_ticket(session: Session, index: int, ready: int, prompt_tokens: int) -> Ticket:
    """The scheduler's ticket for ``session``'s turn ``index``, ready at ``ready``."""
    agent = session.agent
    return Ticket(
        session_id=session.session_id,
        agent=agent.name,
        turn=index,
        ready_ns=ready,
        prompt_tokens=prompt_tokens,
        max_output_tokens=agent.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,
        priority=agent.priority,
        prefix_key=agent.prefix_key,
    )


def rough_estimate(session: Session) -> int:
    """:func:`_rough_tokens` of ``session``'s messages and tools, counting only the
    messages added since the last turn (all of them again if the history was rewritten:
    ``Session._counted`` remembers how far it got)."""
    messages = session.messages
    n, last, chars = session._counted
    if n > len(messages) or (n and messages[n - 1] is not last):
        n, chars = 0, 0
    if n < len(messages):
        chars += _message_chars(messages, n)
        session._counted = (len(messages), messages[-1], chars)
    return _rough(chars + session.agent.tool_chars, len(messages))


def _same_items(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two message lists hold the same objects in the same order."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _rough_tokens(messages: Sequence[Mapping[str, Any]], tool_chars: int = 0) -> int:
    """A cheap prompt estimate (4 characters a token) when no context policy counts.

    Tool schemas are part of the prompt (servers count them in ``prompt_tokens``), so
    their ``tool_chars`` count too: leaving them out would under-charge token limits.
    """
    return _rough(_message_chars(messages) + tool_chars, len(messages))


def _rough(chars: int, messages: int) -> int:
    """The rough estimate itself: 4 characters a token, and 4 tokens of template a
    message."""
    return chars // CHARS_PER_TOKEN + 4 * messages


#: What an image part adds to :func:`_message_chars`: as many characters as the tokens
#: :class:`~agentflow.context.MessageCounter` counts an image as.
_IMAGE_CHARS = IMAGE_TOKENS * CHARS_PER_TOKEN


def _message_chars(messages: Sequence[Mapping[str, Any]], start: int = 0) -> int:
    """The characters of ``messages[start:]`` that :func:`_rough_tokens` counts: string
    content; of list content (parts), each part's ``text`` and :data:`_IMAGE_CHARS` an
    image part; tool calls' arguments."""
    chars = 0
    for i in range(start, len(messages)):
        m = messages[i]
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list | tuple):
            for part in content:
                if isinstance(part, str):
                    chars += len(part)
                elif isinstance(part, Mapping):
                    text = part.get("text")
                    if isinstance(text, str):
                        chars += len(text)
                    elif part.get("type") in IMAGE_PARTS:
                        chars += _IMAGE_CHARS
        for call in m.get("tool_calls") or ():
            chars += len(str(call.get("function", {}).get("arguments", "")))
    return chars
