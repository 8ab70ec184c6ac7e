"""A :class:`Session`: one conversation with an agent, and its turn loop.

One turn: wait for an admission slot → stream the request (tokens to the bus) →
append the assistant message → run the tool calls (outside the slot, concurrently)
→ append their results in call order → next turn, until a final answer or
``max_turns``. Whatever happens, the finished turns and the messages so far stay on
the :class:`SessionResult`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._config import session_run_internals
from agentflow._context_chain import bind_context
from agentflow._errors import ContextOverflow, MaxTurnsExceeded, ToolError
from agentflow._events import (
    ErrorEvent,
    EventBus,
    SessionEndEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from agentflow._logging import get_logger
from agentflow._metrics import turn_metrics
from agentflow._session_types import SessionResult, SessionStatus, TurnLog, TurnRecord
from agentflow._tools import cap_output
from agentflow._trace import ToolCall, TurnTrace
from agentflow._turn_events import TurnEvents
from agentflow.sched import Grant, Replica, RetryPolicy, Scheduler, Ticket, TurnRunner
from agentflow.transport._request import ChatRequest
from agentflow.typing import Callback, Clock, SessionContext, Transport

if TYPE_CHECKING:
    from agentflow._agent import Agent

__all__ = ["Session", "SessionResult", "SessionStatus", "TurnLog", "TurnRecord"]

_log = get_logger("agentflow.session")
_debug = logging.getLogger("agentflow.session")


@functools.cache
def _log_vars() -> tuple[contextvars.ContextVar[Any], ...]:
    """structlog's context variables for agent, session and turn (what
    ``bind_contextvars`` sets; every log line carries them, merged by
    ``merge_contextvars``), so a turn binds one with a single ``set`` instead of building
    a dict of tokens. Looked up when the first session runs: ``import agentflow`` does
    not import structlog."""
    import structlog.contextvars

    out = []
    for key in ("agent", "session", "turn"):
        token = structlog.contextvars.bind_contextvars(**{key: None})[key]
        token.var.reset(token)
        out.append(token.var)
    return tuple(out)


_ids = itertools.count(1)

#: Output tokens a turn is charged for by token limits when its agent sets no max_tokens.
DEFAULT_MAX_OUTPUT_TOKENS = 1024


class Session:
    """One conversation with an :class:`Agent`; create it with :meth:`Agent.session`."""

    # Class-level defaults: an instance holds only what differs from them, so a session
    # queued in a fleet (not run yet, not resumed) carries little more than its messages.
    #: Set when :meth:`run` ends.
    result: SessionResult | None = None
    #: A resumed session's replica endpoint (its last recorded turn's), for stickiness.
    home: str | None = None
    _context: SessionContext | None = None
    _log: TurnLog | None = None
    # Where a resumed session picks up (``_restore``): its next turn, the calls of its
    # last turn that still need running, and outputs recorded for that turn.
    _next_turn = 0
    _pending_calls: tuple[ToolCall, ...] = ()
    # A subclass whose request() differs from turn to turn (agentflow.bench: each turn's
    # max_tokens) sets this, and its request is built for every turn, not once.
    _request_per_turn = False
    _known_outputs: Mapping[str, str] = MappingProxyType({})
    # Run first, inside the session (its failure is the session's): a resumed session's
    # replay of in-memory tool effects (``agentflow.store``).
    _prepare: Callable[[], Awaitable[object]] | None = None
    #: The last turn's request (the next reuses it while ``messages`` is the same list).
    _request: ChatRequest | None = None
    #: Messages counted by the prompt estimate so far: how many, the last, their chars.
    _counted: tuple[int, object, int] = (0, None, 0)

    def __init__(
        self,
        agent: Agent,
        task: str | Sequence[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.agent = agent
        self.session_id = session_id or f"{agent.name}-{next(_ids)}"
        self.metadata = dict(metadata or {})
        self.messages: list[dict[str, Any]] = []
        if agent.instructions:
            self.messages.append({"role": "system", "content": agent.instructions})
        if isinstance(task, str):
            self.messages.append({"role": "user", "content": task})
        else:
            self.messages.extend(dict(m) for m in task)
        self.turns: list[TurnRecord] = []

    def _restore(
        self,
        messages: list[dict[str, Any]],
        turns: list[TurnRecord],
        pending_calls: tuple[ToolCall, ...] = (),
        known_outputs: Mapping[str, str] | None = None,
        home: str | None = None,
    ) -> None:
        """Continue a recorded conversation (``agentflow.store`` resumes through this):
        ``messages`` as rebuilt, the finished ``turns``; when the last turn asked for
        tools, its ``pending_calls`` run first, except those with ``known_outputs``
        (recorded results, used as they are: a recorded call never runs twice);
        ``home``: the endpoint its last turn went to (a fleet routes it back there)."""
        self.home = home
        self.messages = messages
        self.turns = list(turns)
        self._next_turn = len(turns)
        self._pending_calls = pending_calls
        self._known_outputs = dict(known_outputs or {})

    def request(self) -> ChatRequest:
        """The request for the next turn."""
        a = self.agent
        return ChatRequest(
            model=a.model, messages=self.messages, tools=a.tool_specs, params=a.params
        )

    async def run(
        self,
        transport: Transport | None = None,
        *,
        callbacks: Iterable[Callback] = (),
        retry: RetryPolicy | None = RetryPolicy(),
        clock: Clock = time.perf_counter_ns,
        _bus: EventBus | None = None,
        _runner: TurnRunner | None = None,
        _tool_limit: asyncio.Semaphore | None = None,
        _turn_log: TurnLog | None = None,
        **deprecated: Any,
    ) -> SessionResult:
        """Run turns until a final answer, ``max_turns``, an error or cancellation.

        Never raises for a failed session (the error is on the result); re-raises
        cancellation after recording it. Run alone, the session streams through
        ``transport`` with no fleet; inside a :class:`Fleet` the fleet runs it (passing
        its event bus, turn runner, tool bound and run store's log as the private
        ``_bus``, ``_runner``, ``_tool_limit`` and ``_turn_log``; their old public names
        ``bus=``, ``runner=``, ``tool_limit=``, ``turn_log=`` still work, deprecated).

        Args:
            transport: where model turns go.
            callbacks: called with every event of this session.
            retry: how failed turns are retried; ``None`` never retries.
            clock: nanosecond monotonic clock.
        """
        if deprecated:
            wiring = session_run_internals(
                deprecated,
                {"bus": _bus, "runner": _runner, "tool_limit": _tool_limit, "turn_log": _turn_log},
            )
            _bus, _runner = wiring["bus"], wiring["runner"]
            _tool_limit, _turn_log = wiring["tool_limit"], wiring["turn_log"]
        if _turn_log is not None:
            self._log = _turn_log
        if _runner is None:
            if transport is None:
                raise TypeError("Session.run needs a transport (or a fleet's runner)")
            scheduler = Scheduler([Replica(transport=transport)], clock=clock)
            try:
                return await self.run(
                    callbacks=callbacks,
                    _bus=_bus,
                    _runner=TurnRunner(scheduler, retry),
                    _tool_limit=_tool_limit,
                    clock=clock,
                )
            finally:
                await scheduler.aclose()
        if _bus is None:
            bus = EventBus(list(callbacks))
            try:
                return await self.run(
                    _runner=_runner, _bus=bus, _tool_limit=_tool_limit, clock=clock
                )
            finally:
                await bus.aclose()
        return await self._run(_runner, _bus, _tool_limit, clock)

    def _queues_lazily(self) -> bool:
        """Whether nothing has to run before the first turn's ticket is queued, so a
        fleet may queue the session as that ticket alone, with no task until the turn
        is granted (:meth:`_first_ticket`, :meth:`_run`). Not with a context policy
        (its ``before_turn`` runs first), a resumed session, or a subclass's ``run``."""
        return (
            type(self).run is Session.run
            and self.agent.context is None
            and self._prepare is None
            and not self._pending_calls
            and self.home is None
            and self._next_turn < self.agent.max_turns
        )

    def _first_ticket(self, clock: Clock) -> Ticket:
        """The first turn's ticket, as :meth:`_model_turn` would make it now."""
        ready = clock()
        return self._ticket(self._next_turn, ready, self._estimate())

    def _estimate(self) -> int:
        """:func:`_rough_tokens` of the messages and tools, counting only the messages
        added since the last turn (all of them again if the history was rewritten)."""
        messages = self.messages
        n, last, chars = self._counted
        if n > len(messages) or (n and messages[n - 1] is not last):
            n, chars = 0, 0
        if n < len(messages):
            chars += _message_chars(messages, n)
            self._counted = (len(messages), messages[-1], chars)
        return (chars + self.agent.tool_chars) // 4 + 4 * len(messages)

    def _ticket(self, index: int, ready: int, prompt_tokens: int) -> Ticket:
        agent = self.agent
        return Ticket(
            session_id=self.session_id,
            agent=agent.name,
            turn=index,
            ready_ns=ready,
            prompt_tokens=prompt_tokens,
            max_output_tokens=agent.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,
            priority=agent.priority,
            prefix_key=agent.prefix_key,
        )

    async def _run(
        self,
        runner: TurnRunner,
        bus: EventBus,
        tool_limit: asyncio.Semaphore | None,
        clock: Clock,
        first: Grant | BaseException | None = None,
    ) -> SessionResult:
        """The turn loop. ``first``: the grant of the first turn's ticket (from
        :meth:`_first_ticket`), or what failed it, when a fleet queued it already."""
        agent = self.agent
        if agent.context is not None and self._context is None:
            self._context = bind_context(
                agent.context,
                session_id=self.session_id,
                agent=agent.name,
                emit=bus.emit,
                model=agent.model,
                params=agent.params,
            )
        status: SessionStatus = "error"
        error: BaseException | None = None
        final: str | None = None
        agent_var, session_var, turn_var = _log_vars()
        bound_agent, bound_session = agent_var.set(agent.name), session_var.set(self.session_id)
        try:
            if self._prepare is not None:
                prepare, self._prepare = self._prepare, None
                await prepare()
            if self._pending_calls:  # resumed after the model asked for tools
                calls, self._pending_calls = self._pending_calls, ()
                bound = turn_var.set(self._next_turn - 1)
                try:
                    await self._run_tools(self._next_turn - 1, calls, bus, tool_limit, clock)
                finally:
                    turn_var.reset(bound)
            for index in range(self._next_turn, agent.max_turns):
                bound = turn_var.set(index)  # a turn's log lines, its tools' too, carry it
                try:
                    trace = await self._model_turn(index, runner, bus, clock, first)
                    first = None
                    if not trace.tool_calls:
                        if await self._continue(index, trace):
                            continue
                        status, final = "completed", trace.content
                        break
                    await self._run_tools(index, trace.tool_calls, bus, tool_limit, clock)
                finally:
                    turn_var.reset(bound)
            else:
                status = "max_turns"
                error = MaxTurnsExceeded(session_id=self.session_id, max_turns=agent.max_turns)
        except asyncio.CancelledError as exc:
            status, error = "cancelled", exc
            raise
        except Exception as exc:
            status, error = "error", exc
            if isinstance(exc, ContextOverflow) and not exc.session_id:
                exc.session_id = self.session_id  # a server's 400: the wire knows no session
            _log.warning("session.failed", error=repr(exc), turns=len(self.turns))
            bus.emit(
                ErrorEvent(
                    agent=agent.name,
                    session_id=self.session_id,
                    turn=len(self.turns),
                    where="session",
                    error=exc,
                )
            )
        finally:
            result = self._end(runner, bus, status, final, error)
            session_var.reset(bound_session)
            agent_var.reset(bound_agent)
        return result

    def _end(
        self,
        runner: TurnRunner,
        bus: EventBus,
        status: SessionStatus,
        final: str | None,
        error: BaseException | None,
    ) -> SessionResult:
        """Record how the session ended: its result, the run store, the event."""
        runner.scheduler.forget(self.session_id)
        result = SessionResult(
            session_id=self.session_id,
            agent=self.agent.name,
            status=status,
            final_output=final,
            messages=self.messages,
            turns=list(self.turns),
            error=error,
            metadata=self.metadata,
        )
        self.result = result
        if self._log is not None:
            self._log.session_ended(self, result)
        bus.emit(SessionEndEvent(agent=self.agent.name, session_id=self.session_id, result=result))
        return result

    async def _continue(self, index: int, trace: TurnTrace) -> bool:
        """After turn ``index`` answered without tool calls: whether the conversation
        goes on. A plain session ends there (``False``); a scripted one
        (``agentflow.bench``) appends its next message first and returns ``True``."""
        return False

    async def _model_turn(
        self,
        index: int,
        runner: TurnRunner,
        bus: EventBus,
        clock: Clock,
        first: Grant | BaseException | None = None,
    ) -> TurnTrace:
        agent = self.agent
        ctx = self._context
        log = self._log
        prompt = rewrite = None
        if ctx is not None:
            before = list(self.messages) if log is not None else None
            prompt = await ctx.before_turn(
                index, self.messages, agent.tool_specs, self._completer(index, runner, clock)
            )
            if before is not None and not _same_items(before, self.messages):
                rewrite = list(self.messages)  # the policy rewrote history: record it whole
        events = TurnEvents(bus, agent.name, self.session_id, index)
        if isinstance(first, Grant):  # queued by the fleet before the session started
            ticket = first.ticket
            ready = ticket.ready_ns
        else:
            ready = clock()
            estimate = prompt.estimated_tokens if prompt else self._estimate()
            ticket = self._ticket(index, ready, estimate)
        request = self._request
        if request is None or self._request_per_turn or request.messages is not self.messages:
            # Built once: it holds the live list of messages, and the router's
            # session header and cache key do not change from turn to turn.
            request = self._request = runner.routed(ticket, self.request())
        try:
            trace, failed = await runner.send(
                ticket, request, events.sink, events.retry, first=first
            )
        except Exception as exc:
            # The last attempt failed: its tokens are void too. A turn that failed while
            # waiting for a slot (before any attempt, or before a retry) sent nothing new.
            if ticket.sent > events.attempts:
                events.discard(exc, retried=False)
            raise
        if ctx is not None:
            ctx.after_turn(index, trace)
        metrics = turn_metrics(trace, ready_ns=ready)
        if _debug.isEnabledFor(logging.DEBUG):  # skip building a line nobody keeps
            _log.debug(
                "turn.end",
                ttft_s=metrics.ttft_s,
                e2e_s=metrics.e2e_s,
                output_tokens=metrics.output_tokens,
                tool_calls=len(trace.tool_calls),
            )
        self.messages.append(trace.assistant_message())
        record = TurnRecord(index, metrics, trace, prompt, failed)
        self.turns.append(record)
        if log is not None:
            log.turn_finished(self, record, ready, rewrite)
        if bus.wants("turn_end"):
            bus.emit(
                TurnEndEvent(
                    agent=self.agent.name,
                    session_id=self.session_id,
                    turn=index,
                    metrics=metrics,
                    trace=trace,
                    prompt=prompt,
                )
            )
        return trace

    def _completer(
        self, index: int, runner: TurnRunner, clock: Clock
    ) -> Callable[[ChatRequest], Awaitable[TurnTrace]]:
        """A context policy's ``complete`` for turn ``index``: one extra model request
        through the same scheduler, limits and retries."""

        async def complete(extra: ChatRequest) -> TurnTrace:
            tool_chars = len(msgspec.json.encode(extra.tools)) if extra.tools else 0
            estimate = _rough_tokens(extra.messages, tool_chars)
            trace, _ = await runner.send(self._ticket(index, clock(), estimate), extra)
            return trace

        return complete

    async def _run_tools(
        self,
        index: int,
        calls: tuple[ToolCall, ...],
        bus: EventBus,
        limit: asyncio.Semaphore | None,
        clock: Clock,
    ) -> None:
        outputs = await asyncio.gather(  # the caller binds the turn: tools log it
            *[self._run_tool(index, c, bus, limit, clock) for c in calls]
        )
        for call, output in zip(calls, outputs, strict=True):
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        if self._known_outputs:
            self._known_outputs = MappingProxyType({})

    async def _run_tool(
        self,
        index: int,
        call: ToolCall,
        bus: EventBus,
        limit: asyncio.Semaphore | None,
        clock: Clock,
    ) -> str:
        known = self._known_outputs
        if call.id in known:  # recorded before the run was stopped: never run twice
            return known[call.id]
        if bus.wants("tool_call"):
            bus.emit(
                ToolCallEvent(
                    agent=self.agent.name, session_id=self.session_id, turn=index, call=call
                )
            )
        start = clock()
        is_error = False
        tool = self.agent.tool(call.name)
        try:
            if tool is None:
                raise ToolError(f"the model called unknown tool {call.name!r}", tool=call.name)
            async with limit if limit is not None else nullcontext():
                output = await tool.invoke(
                    call.arguments, default_timeout_s=self.agent.tool_timeout_s
                )
        except ToolError as exc:
            if self.agent.tool_errors == "raise":
                raise
            is_error, output = True, f"Error: {exc}"
            bus.emit(
                ErrorEvent(
                    agent=self.agent.name,
                    session_id=self.session_id,
                    turn=index,
                    where="tool",
                    error=exc,
                )
            )
        cap = self.agent.max_tool_output_chars
        if tool is not None and tool.max_output_chars is not None:
            cap = tool.max_output_chars
        output, cut = cap_output(output, cap)
        duration = (clock() - start) * 1e-9
        if self._log is not None:
            self._log.tool_finished(self, index, call, output, is_error, duration, cut)
        if bus.wants("tool_result"):
            bus.emit(
                ToolResultEvent(
                    agent=self.agent.name,
                    session_id=self.session_id,
                    turn=index,
                    call_id=call.id,
                    name=call.name,
                    output=output,
                    is_error=is_error,
                    duration_s=duration,
                    truncated_chars=cut,
                )
            )
        return output


def _same_items(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two message lists hold the same objects in the same order."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _rough_tokens(messages: Sequence[Mapping[str, Any]], tool_chars: int = 0) -> int:
    """A cheap prompt estimate (4 characters a token) when no context policy counts.

    Tool schemas are part of the prompt (servers count them in ``prompt_tokens``), so
    their ``tool_chars`` count too: leaving them out would under-charge token limits.
    """
    return (_message_chars(messages) + tool_chars) // 4 + 4 * len(messages)


def _message_chars(messages: Sequence[Mapping[str, Any]], start: int = 0) -> int:
    """The characters of ``messages[start:]`` that :func:`_rough_tokens` counts."""
    chars = 0
    for i in range(start, len(messages)):
        m = messages[i]
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        for call in m.get("tool_calls") or ():
            chars += len(str(call.get("function", {}).get("arguments", "")))
    return chars
