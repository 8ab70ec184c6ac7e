"""A :class:`Session`: one conversation with an agent, and its turn loop.

One turn: wait for an admission slot → stream the request (tokens to the bus) →
append the assistant message → run the tool calls (outside the slot, concurrently)
→ append their results in call order → next turn, until a final answer or
``max_turns``. Whatever happens, the finished turns and the messages so far stay on
the :class:`SessionResult`.

Here: the conversation's state, :meth:`Session.run` and the turn loop. One model turn is
in ``_session_turn.py``, its tool calls in ``_session_tools.py``, the result types and
the run store's :class:`TurnLog` in ``_session_types.py``; names that moved out are
still importable from here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentflow._config import session_run_internals
from agentflow._context_chain import bind_context, end_session
from agentflow._context_resumed import Resumed, resume_session
from agentflow._errors import ContextOverflow, MaxTurnsExceeded
from agentflow._event_bus import EventBus
from agentflow._events import ErrorEvent, SessionEndEvent
from agentflow._fleet_checks import check_callbacks, check_function, check_kind
from agentflow._logging import get_logger
from agentflow._logging import log_vars as _log_vars
from agentflow._sendable import check_sendable
from agentflow._session_checks import (
    check_agent,
    check_session_id,
    hold,
    refused,
    session_metadata,
    task_messages,
)
from agentflow._session_tools import run_tools
from agentflow._session_turn import DEFAULT_MAX_OUTPUT_TOKENS as DEFAULT_MAX_OUTPUT_TOKENS
from agentflow._session_turn import _rough_tokens as _rough_tokens
from agentflow._session_turn import _same_items as _same_items
from agentflow._session_turn import model_turn, rough_estimate, turn_ticket
from agentflow._session_types import SessionResult, SessionStatus, TurnLog, TurnRecord
from agentflow._trace import ToolCall, TurnTrace
from agentflow.sched import Grant, Replica, RetryPolicy, Scheduler, Ticket, TurnRunner
from agentflow.transport._request import ChatRequest
from agentflow.typing import Callback, Clock, SessionContext, Transport

if TYPE_CHECKING:
    from agentflow._agent import Agent

__all__ = ["Session", "SessionResult", "SessionStatus", "TurnLog", "TurnRecord"]

_log = get_logger("agentflow.session")


_ids = itertools.count(1)


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
    #: The tool call ids the session has used, once a turn asked for tools (``_call_ids.py``).
    _call_ids: set[str] | None = None
    #: Where its recorded conversation stands, for its context once bound (``_restore``).
    _resumed: Resumed | None = None
    # Run first, inside the session (its failure is the session's): a resumed session's
    # replay of in-memory tool effects (``agentflow.store``).
    _prepare: Callable[[], Awaitable[object]] | None = None
    #: The last turn's request (the next reuses it while ``messages`` is the same list).
    _request: ChatRequest | None = None
    #: Messages counted by the prompt estimate so far: how many, the last, their chars.
    _counted: tuple[int, object, int] = (0, None, 0)
    #: Sessions that ran after this one, in its place, within its run, in the order they
    #: ran (a bench concurrency level's slot: ``agentflow.bench``); each ended before
    #: this one's run returned. The fleet's result lists their results after this one's.
    _followers: Sequence[Session] = ()
    #: Set while a run holds the session (``_session_checks.hold``): a second run at once
    #: is refused.
    _running = False

    def __init__(
        self,
        agent: Agent,
        task: str | Sequence[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        check_agent(agent)
        self.agent = agent
        if session_id is not None and session_id != "":
            check_session_id(session_id)
        self.session_id = session_id or f"{agent.name}-{next(_ids)}"
        self.metadata = session_metadata(metadata, f"session {self.session_id!r}: metadata")
        # Here, not at its first request: a task that is not messages, or a text no
        # request can carry (a lone surrogate), is a ConfigError naming it, not an error
        # deep in a turn or the transport.
        where = f"session {self.session_id!r}: task"
        given = task_messages(task, where)
        check_sendable(task if isinstance(task, str) else given, where)
        self.messages: list[dict[str, Any]] = []
        if agent.instructions:
            self.messages.append({"role": "system", "content": agent.instructions})
        self.messages += given
        self.turns: list[TurnRecord] = []
        # What a run sets, set here to the class's defaults, in one order. CPython shares
        # one key table among a class's instances, but stops adding keys to it once many
        # instances exist: an attribute first set after thousands of sessions were made
        # (a second fleet's queued sessions, before any of them ran) gave each session
        # that set it a dict of its own — one more tracked object per session.
        self._running = False
        self._counted = Session._counted
        self._request = self._context = self._log = self.result = self._call_ids = None

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
        if turns and self.agent.context is not None:  # told to its context once bound
            a, last = self.agent, turns[-1]  # its prompt: all before its reply
            prompt = messages[:-1]
            opening = self.messages  # the system prompt and task, as the session began
            self._resumed = Resumed(
                opening, last.index, prompt, a.tool_specs, last.trace, last.prompt
            )
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

        A session runs once, in one run: its turn numbers, ``max_turns`` budget, run
        store record and result belong to that run. To go on with a conversation, start a
        new session from its messages.

        Args:
            transport: where model turns go.
            callbacks: called with every event of this session.
            retry: how failed turns are retried; ``None`` never retries.
            clock: nanosecond monotonic clock.

        Raises:
            ConfigError: the session has already run, or is running now (in another
                ``run`` or a fleet's run); a fleet refuses it too. Run alone: ``retry``
                is not a :class:`RetryPolicy` or ``None``, or ``callbacks`` not a list
                of callables (as a :class:`Fleet` checks its own).
        """
        if self.result is not None:
            raise refused(self)
        if deprecated:
            wiring = session_run_internals(
                deprecated,
                {"bus": _bus, "runner": _runner, "tool_limit": _tool_limit, "turn_log": _turn_log},
            )
            _bus, _runner = wiring["bus"], wiring["runner"]
            _tool_limit, _turn_log = wiring["tool_limit"], wiring["turn_log"]
        if _turn_log is not None:
            self._log = _turn_log
        if _runner is None:  # run alone (a fleet holds its sessions when its run starts)
            if transport is None:
                raise TypeError("Session.run needs a transport (or a fleet's runner)")
            check_kind(retry, RetryPolicy, "Session.run: retry")  # as a Fleet's are
            check_function(clock, "Session.run: clock", "monotonic nanoseconds")
            callbacks = check_callbacks(callbacks, "Session.run: callbacks")
            hold(self)
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
                self._running = False
                await scheduler.aclose()
        if _bus is None:
            bus = EventBus(list(callbacks))
            cancelled = False
            try:
                return await self.run(
                    _runner=_runner, _bus=bus, _tool_limit=_tool_limit, clock=clock
                )
            except asyncio.CancelledError:
                cancelled = True  # a stalled async callback does not hold that up
                raise
            finally:
                await bus.aclose(cancelled=cancelled)
        return await self._run(_runner, _bus, _tool_limit, clock)

    def __getstate__(self) -> dict[str, Any]:
        # A worker of Fleet(workers=N) gets its sessions pickled while the parent's run
        # holds them: the copy is not held.
        state = dict(self.__dict__)
        state.pop("_running", None)
        return state

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
        """The first turn's ticket, as :func:`~agentflow._session_turn.model_turn` would
        make it now."""
        ready = clock()
        return self._ticket(self._next_turn, ready, rough_estimate(self))

    def _ticket(self, index: int, ready: int, prompt_tokens: int) -> Ticket:
        """Turn ``index``'s ticket (``agentflow.bench`` charges its own ``max_tokens``)."""
        return turn_ticket(self, index, ready, prompt_tokens)

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
        status: SessionStatus = "error"
        error: BaseException | None = None
        final: str | None = None
        agent_var, session_var, turn_var = _log_vars()
        bound_agent, bound_session = agent_var.set(agent.name), session_var.set(self.session_id)
        # The turn being worked on, which a failure names: the model turn, or the turn
        # whose tools are running (a tool's error with tool_errors="raise").
        working = self._next_turn
        try:
            if agent.context is not None and self._context is None:
                # Inside: a budget that cannot bind (no window known for the model) ends
                # this session with its ConfigError, not the fleet with it.
                self._context = bind_context(
                    agent.context,
                    session_id=self.session_id,
                    agent=agent.name,
                    emit=bus.emit,
                    model=agent.model,
                    params=agent.params,
                )
                if self._resumed is not None:
                    resume_session(self._context, self._resumed)
            if self._prepare is not None:
                prepare, self._prepare = self._prepare, None
                await prepare()
            if self._pending_calls:  # resumed after the model asked for tools
                calls, self._pending_calls = self._pending_calls, ()
                working = self._next_turn - 1
                bound = turn_var.set(working)
                try:
                    await run_tools(self, self._next_turn - 1, calls, bus, tool_limit, clock)
                finally:
                    turn_var.reset(bound)
            for index in range(self._next_turn, agent.max_turns):
                working = index
                bound = turn_var.set(index)  # a turn's log lines, its tools' too, carry it
                try:
                    trace = await model_turn(self, index, runner, bus, clock, first)
                    first = None
                    if not trace.tool_calls:
                        if await self._continue(index, trace):
                            continue
                        status, final = "completed", trace.content
                        break
                    await run_tools(self, index, trace.tool_calls, bus, tool_limit, clock)
                finally:
                    turn_var.reset(bound)
            else:
                status = "max_turns"
                error = MaxTurnsExceeded(session_id=self.session_id, max_turns=agent.max_turns)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as exc:
            status, error = "cancelled", exc  # (a Ctrl-C in a sync callback: not "error")
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
                    turn=working,
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
        if self._context is not None:
            end_session(self._context)  # a cache-buster check's unmeasured bust, say
        result = SessionResult(
            session_id=self.session_id,
            agent=self.agent.name,
            status=status,
            final_output=final,
            # A copy, like turns: the conversation as it ended, whatever is done to the
            # session's list afterwards (a message appended for a next session, say).
            messages=list(self.messages),
            turns=list(self.turns),
            error=error,
            metadata=self.metadata,
            end_ns=runner.scheduler.clock(),
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
