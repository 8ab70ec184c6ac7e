"""1M-token sessions against the report's deployment, in virtual time: the budget acts, never
the server.

The simulator runs the ``deepseek-v4.1-flash-gb300`` profile in process (``SimTransport``)
with the deployment's ``--max-model-len 1000000``, and the budget reads that limit from it
(``ContextBudget.from_server``). Each agent reads ~100k-token files until its history has
passed a million tokens several times over. For every overflow policy, no request is ever
refused by the server for length: ``Fail`` ends its session with the budget's own
:class:`~agentflow.ContextOverflow` before sending; ``DropOldest``, ``Compact`` and
``TruncateToolOutputs`` keep every prompt under the window.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentflow import (
    Agent,
    APIStatusError,
    ContextLengthExceeded,
    ContextOverflow,
    Fleet,
    MaxTurnsExceeded,
    SessionResult,
    Tool,
    TurnTrace,
)
from agentflow.context import (
    Compact,
    ContextBudget,
    ContextTrimmedEvent,
    DropOldest,
    Fail,
    OverflowPolicy,
    TruncateToolOutputs,
)
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.planner import get_deployment
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.sim.textgen import DEFAULT_WORDS
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink

DEPLOYMENT = "deepseek-v4.1-flash-gb300"
#: Words per file read; the simulator and cl100k both spend about one token on each.
FILE_WORDS = 100_000
MAX_TOKENS = 256
TOOL_ROUNDS = 16


def file_text(n: int, words: int = FILE_WORDS) -> str:
    """``words`` words (a multiple of 1,000) of the simulator's vocabulary; file ``n``'s."""
    line = " ".join(DEFAULT_WORDS[(n + 7 * i) % len(DEFAULT_WORDS)] for i in range(1000))
    return f"file {n}:\n" + "\n".join([line] * (words // 1000))


@dataclass
class Recorder:
    """The in-process simulator, with every request's outcome written down."""

    inner: SimTransport
    prompts: list[int] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        try:
            trace = await self.inner.stream(request, sink)
        except Exception as exc:
            self.errors.append(exc)
            raise
        assert trace.usage is not None and trace.usage.prompt_tokens is not None
        self.prompts.append(trace.usage.prompt_tokens)
        return trace

    async def models(self) -> dict[str, Any]:
        return await self.inner.models()

    async def aclose(self) -> None:
        await self.inner.aclose()


POLICIES: dict[str, OverflowPolicy] = {
    "fail": Fail(),
    "drop_oldest": DropOldest(),
    "compact": Compact(max_summary_tokens=128),
    "truncate_tool_outputs": TruncateToolOutputs(max_tokens=2_000),
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_million_token_session_is_never_refused_for_length(name: str) -> None:
    limit = get_deployment(DEPLOYMENT).context_limit
    assert limit == 1_000_000
    calls = iter(range(1_000))

    def read_file(path: str) -> str:
        """Read a file of the repository.

        Args:
            path: the file's path.
        """
        return file_text(next(calls))

    async def main() -> tuple[SessionResult, Recorder, ContextBudget, list[Any]]:
        engine = Engine(DEPLOYMENT, seed=3, textgen=TextGenConfig(answer_tokens=(8, 16)))
        transport = Recorder(SimTransport(EngineDriver(engine)))
        budget = await ContextBudget.from_server(
            transport, overflow=POLICIES[name], pin_first=1, cache_buster=False
        )
        agent = Agent(
            name=name,
            model=engine.profile.model,
            instructions="You read the repository and report what it does.",
            tools=[Tool.from_function(read_file, in_thread=False)],
            params={"max_tokens": MAX_TOKENS, "agentflow_tool_rounds": TOOL_ROUNDS},
            max_turns=TOOL_ROUNDS + 1,
            context=budget,
        )
        events: list[Any] = []
        fleet = Fleet(transport, clock=loop_clock, callbacks=[events.append])
        try:
            result = await fleet.run([agent.session("Summarise the repository.")])
        finally:
            await transport.aclose()
        return result.sessions[0], transport, budget, events

    session, transport, budget, events = run_virtual(
        asyncio.wait_for(main(), 600)  # a hang guard in virtual time, not a duration check
    )
    # The budget read the deployment's limit from the server, not a table.
    assert budget.window == limit and budget.window_source.endswith("max_model_len")
    # No request was refused, for length or anything else; every prompt fit.
    assert transport.errors == []
    assert transport.prompts and max(transport.prompts) + MAX_TOKENS <= limit
    trimmed = [e for e in events if isinstance(e, ContextTrimmedEvent)]
    if name == "fail":
        # The budget ended the session before sending the prompt that would not fit.
        assert isinstance(session.error, ContextOverflow)
        assert not isinstance(session.error, ContextLengthExceeded | APIStatusError)
        assert session.error.limit == limit and session.error.tokens > limit
        assert max(transport.prompts) > 0.8 * limit  # it got close to the window first
        return
    # The policy acted (more than once), and the history had passed 1M tokens several times.
    assert len(trimmed) >= 2 and all(e.tokens_after <= e.limit for e in trimmed)
    assert sum(transport.prompts) > 5 * limit
    assert max(transport.prompts) > 0.7 * limit
    # The session ends normally, or at max_turns (the simulator counts tool rounds from the
    # messages it sees, so after a drop or a compaction it may keep calling tools).
    assert session.error is None or isinstance(session.error, MaxTurnsExceeded), session.error


def test_a_window_larger_than_the_servers_gets_a_mapped_400_not_a_retry() -> None:
    """The defect this guards: a budget over the old table's 1,048,576 lets a prompt of just
    over 1,000,000 tokens through; the server refuses it, and that 400 arrives as a
    :class:`ContextLengthExceeded` with the server's numbers, sent once, never retried."""
    sizes = iter(enumerate([FILE_WORDS] * 8 + [FILE_WORDS // 10] * 10))

    def read_file(path: str) -> str:
        """Read a file of the repository.

        Args:
            path: the file's path.
        """
        return file_text(*next(sizes))

    async def main() -> tuple[SessionResult, Recorder]:
        engine = Engine(DEPLOYMENT, seed=3, textgen=TextGenConfig(answer_tokens=(8, 16)))
        transport = Recorder(SimTransport(EngineDriver(engine)))
        agent = Agent(
            name="old-table",
            model=engine.profile.model,
            instructions="You read the repository and report what it does.",
            tools=[Tool.from_function(read_file, in_thread=False)],
            params={"max_tokens": MAX_TOKENS, "agentflow_tool_rounds": TOOL_ROUNDS},
            max_turns=TOOL_ROUNDS + 1,
            context=ContextBudget(window=1_048_576, cache_buster=False),
        )
        try:
            result = await Fleet(transport, clock=loop_clock).run([agent.session("Go.")])
        finally:
            await transport.aclose()
        return result.sessions[0], transport

    session, transport = run_virtual(asyncio.wait_for(main(), 600))
    error = session.error
    assert isinstance(error, ContextLengthExceeded) and isinstance(error, ContextOverflow)
    assert error.limit == 1_000_000 and error.tokens >= 1_000_000 - MAX_TOKENS
    assert error.prompt_tokens is not None and error.prompt_tokens <= error.tokens
    assert error.status == 400 and error.session_id == session.session_id
    # Sent once: the only failed request is this one, and it was not resent.
    assert transport.errors == [error]
    assert len(transport.prompts) == len(session.turns)
    assert max(transport.prompts) < 1_000_000 < error.tokens + MAX_TOKENS
