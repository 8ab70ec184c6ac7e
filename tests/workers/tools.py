"""What the worker tests' agents use: module-level, so a worker process can import them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentflow import Agent, PromptInfo, Session, TurnTrace
from agentflow.sim import Tokenizer
from agentflow.typing import Complete


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


TOOL = Agent(
    name="tool", model="m", instructions="Use the tool.", tools=[lookup], params={"max_tokens": 32}
)
PLAIN = Agent(name="plain", model="m", instructions="Answer briefly.", params={"max_tokens": 16})


def workload(n: int) -> list[Session]:
    """``n`` tiny sessions with fixed ids: half answer at once, half call a tool first."""
    agents = (PLAIN, TOOL)
    return [agents[i % 2].session(f"question {i}", session_id=f"s{i}") for i in range(n)]


class ExactCount:
    """A context policy that only counts the prompt, with the simulator's own tokenizer,
    so each turn's estimate is what the server will count — or, with ``lie``, what
    ``lie`` makes of it (``raw_estimate`` stays the true count). Also used by
    tests/sched/test_limits.py."""

    def __init__(self, *, lie: Callable[[int], int] | None = None) -> None:
        self._tok = Tokenizer()
        self._lie = lie

    def bind(self, **_: Any) -> ExactCount:
        return self

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo:
        n = len(self._tok.render_chat(messages, list(tools) or None))
        estimate = n if self._lie is None else self._lie(n)
        return PromptInfo(estimated_tokens=estimate, raw_estimate=n)

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        return None


def counted_workload(n: int) -> list[Session]:
    """:func:`workload` with exact prompt counts (for token limits at the server)."""
    agents = [dataclasses.replace(a, context=ExactCount()) for a in (PLAIN, TOOL)]
    return [agents[i % 2].session(f"question {i}", session_id=f"s{i}") for i in range(n)]


class LateStart:
    """A context policy whose first turn waits ``delay_s`` before it is sent (a session
    that spends a while in its tools before its first request)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def bind(self, **_: Any) -> LateStart:
        return self

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo:
        if turn == 0 and self.delay_s:
            await asyncio.sleep(self.delay_s)
        return PromptInfo(estimated_tokens=10, raw_estimate=10)

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        return None


def idle_then_burst(n: int, delay_s: float) -> list[Session]:
    """One session at once, then ``n`` that all wait ``delay_s`` first: a worker is busy,
    idle while the limit's bucket refills, then bursts."""
    early = dataclasses.replace(PLAIN, name="early", context=LateStart(0.0))
    late = dataclasses.replace(PLAIN, name="late", context=LateStart(delay_s))
    return [(early if k == 0 else late).session(f"q{k}", session_id=f"s{k}") for k in range(n + 1)]
