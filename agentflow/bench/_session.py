"""Scripted sessions: a :class:`SessionScript` run as an ordinary :class:`Session`.

A :class:`BenchSession` *is* a :class:`~agentflow.Session`: its turns go through the
fleet's scheduler, limits, router, retries, transport and event bus like any agent's,
and every figure comes from the same ``TurnEndEvent`` s. It only adds what a script
decides: when it starts (open-loop arrival, or a free live-session slot), each turn's
``max_tokens``, and — where a model agent would get a tool result — the wait (tool
latency, think time), the sub-agents it forks and waits for, and the next message.

Sub-agents are :class:`BenchSession` s too, run on the parent's fleet runner, bus and
clock (they are not in the fleet's session list, so not in ``FleetResult.sessions``;
their turns are in the events and therefore in every figure). The sessions a
concurrency level's slot runs after its first are in ``FleetResult.sessions``, each
after the one it followed (``Session._followers``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agentflow._agent import Agent
from agentflow._config import session_run_internals
from agentflow._event_bus import EventBus
from agentflow._session import Session
from agentflow._session_types import SessionResult, TurnLog
from agentflow._trace import TurnTrace
from agentflow.bench._spec import SessionScript
from agentflow.sched import RetryPolicy, Ticket, TurnRunner
from agentflow.transport._request import ChatRequest
from agentflow.typing import Callback, Clock, Transport

__all__ = ["BenchRun", "BenchSession"]

#: ``Agent.max_turns`` of scripted agents: the script ends a session, not this bound.
_MAX_TURNS = 1_000_000


class BenchRun:
    """What every scripted session of one run (one load level) shares.

    Args:
        model: the model name to request.
        params: body fields every request carries (``temperature``, ``ignore_eos``…);
            each turn's ``max_tokens`` comes from its script.
        t0: the run's start on the event loop's clock (``loop.time()``); arrivals are
            offsets from it.
        end: the loop time after which no session starts and no new turn is sent
            (turns in flight finish); ``None``: run every script to its end.
        live: the most top-level sessions alive at once (fixed-concurrency load; the
            others wait their turn in order); ``None``: no bound (open loop).
    """

    def __init__(
        self,
        *,
        model: str,
        params: Mapping[str, Any],
        t0: float,
        end: float | None = None,
        live: int | None = None,
    ) -> None:
        self.model = model
        self.params = dict(params)
        self.t0 = t0
        self.end = end
        self.slots = asyncio.Semaphore(live) if live is not None else None
        self._agents: dict[tuple[str, str | None], Agent] = {}
        self._bare: dict[str, Agent] = {}
        #: Loop times at which top-level sessions started (after arrival and slot).
        self.starts: list[float] = []
        #: Loop times at which top-level sessions ended.
        self.ends: list[float] = []
        #: When each session (sub-agents too) started, on the fleet's clock (ns): a
        #: level counts the end of a session that started in its window even when no
        #: turn of it finished (it failed on its first).
        self.started_ns: dict[str, int] = {}
        #: Sessions that never started (the run ended first).
        self.not_started = 0
        #: Sessions that stopped before their script's end because the run ended.
        self.cut = 0
        #: Those of them that were top-level sessions.
        self.cut_top_level = 0
        #: Sub-agent sessions run.
        self.subagents = 0

    def ended(self, now: float) -> bool:
        """Whether the run's end has passed at loop time ``now``."""
        return self.end is not None and now >= self.end

    def bare_agent(self, label: str) -> Agent:
        """The agent a session of ``label`` has until it starts: no system prompt yet."""
        agent = self._bare.get(label)
        if agent is None:
            agent = self._bare[label] = Agent(
                name=label, model=self.model, params=self.params, max_turns=_MAX_TURNS
            )
        return agent

    def agent_for(self, script: SessionScript) -> Agent:
        """The :class:`Agent` a script talks to: one per (label, shared prefix), so
        sessions that share a prefix share its ``prefix_key`` for the scheduler and
        router; a script with its own prefix (``system_key=None``) gets its own."""
        key = (script.agent, script.system_key)
        agent = self._agents.get(key) if script.system_key is not None else None
        if agent is None:
            agent = Agent(
                name=script.agent,
                model=self.model,
                instructions=script.system_text(),
                params=self.params,
                max_turns=_MAX_TURNS,
            )
            if script.system_key is not None:
                self._agents[key] = agent
        return agent


class BenchSession(Session):
    """A :class:`~agentflow.Session` that follows a :class:`SessionScript`.

    Args:
        script: what it does.
        run: what it shares with the run's other sessions.
        start_at: loop time at which it starts; default ``run.t0 + script.arrival_s``.
        top_level: counted against ``run``'s live-session slots and in its start and
            end times (sub-agents are not).
        successors: fixed concurrency: when it ends before the run's end, it runs the
            next script of these in its place (at once, in its live-session slot), and so
            on until the run's end or theirs. Several sessions may share one iterator:
            each of them is one slot. Those sessions are not in the list the fleet was
            given, but the fleet's result has theirs, after this one's (in the order
            they ran).
    """

    def __init__(
        self,
        script: SessionScript,
        run: BenchRun,
        *,
        start_at: float | None = None,
        top_level: bool = True,
        successors: Iterator[SessionScript] | None = None,
    ) -> None:
        # The task's text and the system prompt are made when the session starts
        # (:meth:`_bind`): a level plans every session up front, and synthetic text is
        # most of what a waiting session would hold.
        super().__init__(
            run.bare_agent(script.agent),
            "",
            session_id=script.session_id,
            metadata={"bench_agent": script.agent},
        )
        self.script = script
        self.bench = run
        self.start_at = run.t0 + script.arrival_s if start_at is None else start_at
        self.top_level = top_level
        self.successors = successors
        #: Whether the run's end stopped it before its script's end.
        self.cut = False
        self._fleet: tuple[TurnRunner, EventBus, asyncio.Semaphore | None, Clock] | None = None

    _request_per_turn = True  # each turn's own max_tokens

    def _max_tokens(self, index: int) -> int:
        turns = self.script.turns
        return turns[min(index, len(turns) - 1)].max_tokens

    def request(self) -> ChatRequest:
        """The next turn's request: the agent's body fields with this turn's ``max_tokens``."""
        params = dict(self.agent.params)
        params["max_tokens"] = self._max_tokens(len(self.turns))
        return ChatRequest(model=self.agent.model, messages=self.messages, params=params)

    def _ticket(self, index: int, ready: int, prompt_tokens: int) -> Ticket:
        """The turn's ticket, charged for its own ``max_tokens`` by token-rate limits (not
        the 1,024 tokens a turn of an agent without ``max_tokens`` is charged)."""
        ticket = super()._ticket(index, ready, prompt_tokens)
        ticket.max_output_tokens = self._max_tokens(index)
        return ticket

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
        """Wait for its arrival (and a live-session slot), then run as a Session does.

        A session whose start comes after the run's end does not run: it returns a
        ``cancelled`` result with no turns and emits no event.
        """
        if deprecated:
            wiring = session_run_internals(
                deprecated,
                {"bus": _bus, "runner": _runner, "tool_limit": _tool_limit, "turn_log": _turn_log},
            )
            _bus, _runner = wiring["bus"], wiring["runner"]
            _tool_limit, _turn_log = wiring["tool_limit"], wiring["turn_log"]
        if _runner is None or _bus is None:  # run alone: Session.run builds them, then calls back
            return await super().run(
                transport,
                callbacks=callbacks,
                retry=retry,
                clock=clock,
                _bus=_bus,
                _runner=_runner,
                _tool_limit=_tool_limit,
                _turn_log=_turn_log,
            )
        self._fleet = (_runner, _bus, _tool_limit, clock)
        result = await self._run_script(_runner, _bus, _tool_limit, clock, _turn_log)
        if self.successors is not None:
            await self._hand_on(self.successors, _runner, _bus, _tool_limit, clock, _turn_log)
        return result

    async def _run_script(
        self,
        runner: TurnRunner,
        bus: EventBus,
        tool_limit: asyncio.Semaphore | None,
        clock: Clock,
        turn_log: TurnLog | None,
    ) -> SessionResult:
        """Wait for its start, then run its script (see :meth:`run`)."""
        run = self.bench
        loop = asyncio.get_running_loop()
        delay = self.start_at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        slots = run.slots if self.top_level else None
        if slots is not None:
            if run.ended(loop.time()):
                return self._not_started()
            await slots.acquire()
        try:
            if run.ended(loop.time()):
                return self._not_started()
            if self.top_level:
                run.starts.append(loop.time())
            else:
                run.subagents += 1
            run.started_ns[self.session_id] = clock()
            self._bind()
            first = self.script.turns[0]
            task = self.script.turn_text(0)
            if first.subagents:
                task += await self._fork(first.subagents)
            self.messages[-1]["content"] = task
            try:
                return await super().run(
                    _bus=bus,
                    _runner=runner,
                    _tool_limit=tool_limit,
                    clock=clock,
                    _turn_log=turn_log,
                )
            finally:
                if self.top_level:
                    run.ends.append(loop.time())
        finally:
            if slots is not None:
                slots.release()

    def _bind(self) -> None:
        """Give the starting session its agent (its system prompt: made now, or shared
        with the sessions of its ``system_key``)."""
        self.agent = self.bench.agent_for(self.script)
        if self.agent.instructions:
            self.messages.insert(0, {"role": "system", "content": self.agent.instructions})

    async def _hand_on(
        self,
        successors: Iterator[SessionScript],
        runner: TurnRunner,
        bus: EventBus,
        tool_limit: asyncio.Semaphore | None,
        clock: Clock,
        turn_log: TurnLog | None,
    ) -> None:
        """Run the next scripts of ``successors`` in this session's slot, one after
        another, until the run's end or the scripts' end."""
        loop = asyncio.get_running_loop()
        followers: list[Session] = []
        self._followers = followers  # in the fleet's result after this one's
        while not self.bench.ended(loop.time()):
            script = next(successors, None)
            if script is None:
                return
            successor = BenchSession(script, self.bench, start_at=loop.time())
            await successor.run(
                _runner=runner, _bus=bus, _tool_limit=tool_limit, clock=clock, _turn_log=turn_log
            )
            followers.append(successor)

    def _not_started(self) -> SessionResult:
        self.bench.not_started += 1
        result = SessionResult(
            session_id=self.session_id,
            agent=self.agent.name,
            status="cancelled",
            final_output=None,
            messages=self.messages,
            turns=[],
            metadata=self.metadata,
        )
        self.result = result
        return result

    async def _continue(self, index: int, trace: TurnTrace) -> bool:
        """Before scripted turn ``index + 1``: wait (tool, think), fork and join its
        sub-agents, append its message. ``False`` at the script's end or the run's."""
        turns = self.script.turns
        k = index + 1
        if k >= len(turns):
            return False
        run = self.bench
        loop = asyncio.get_running_loop()
        if run.ended(loop.time()):
            return self._cut()
        turn = turns[k]
        wait = turn.tool_s + turn.think_s
        # A wait that ends after the run's end leads to no turn: sleep only until the end
        # (the session stays alive until then, as scripted, and keeps its live-session
        # slot), then stop. Sleeping it all would hold the level open past its end, to be
        # cancelled at the drain's end as if a turn were still in flight.
        end = run.end if run.end is not None else math.inf
        past_end = loop.time() + wait >= end
        if past_end:
            wait = max(0.0, end - loop.time())
        answers = ""
        if turn.subagents:
            _, answers = await asyncio.gather(asyncio.sleep(wait), self._fork(turn.subagents))
        elif wait > 0:
            await asyncio.sleep(wait)
        if past_end or run.ended(loop.time()):
            return self._cut()
        self.messages.append({"role": "user", "content": self.script.turn_text(k) + answers})
        return True

    def _cut(self) -> bool:
        self.cut = True
        self.bench.cut += 1
        self.bench.cut_top_level += self.top_level
        return False

    async def _fork(self, scripts: tuple[SessionScript, ...]) -> str:
        """Run sub-agent sessions on this session's fleet; their answers, as text."""
        assert self._fleet is not None
        runner, bus, tool_limit, clock = self._fleet
        now = asyncio.get_running_loop().time()
        subs = [
            BenchSession(s, self.bench, start_at=now + s.arrival_s, top_level=False)
            for s in scripts
        ]
        results = await asyncio.gather(
            *(s.run(_runner=runner, _bus=bus, _tool_limit=tool_limit, clock=clock) for s in subs)
        )
        parts = []
        for r in results:
            body = r.final_output if r.ok else f"(no answer: {r.status})"
            parts.append(f"\n\n[{r.session_id}]{body or ''}")
        return "".join(parts)
