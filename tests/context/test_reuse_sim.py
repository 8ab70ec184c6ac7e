"""Prefix-reuse efficiency against the simulator's prefix cache, which — as vLLM's — also
caches the tokens a request generated: the client's cacheable maximum must include the
previous reply wherever the next prompt repeats it, so efficiency never exceeds 100%."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentflow import Agent, Fleet, SessionResult, Tool
from agentflow.context import ContextBudget, ContextChain, PrefixIndex, prefix_reuse
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver

PROFILE = "deepseek-v4.1-flash-gb300"


def writer(lines: int) -> Tool:
    """A tool whose calls carry exactly ``lines`` strings: the model's reply length."""

    def write(lines: list[str]) -> str:
        return f"wrote {len(lines)} lines"

    return Tool(
        name="write",
        description="Write lines to the file.",
        parameters={
            "type": "object",
            "properties": {
                "lines": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": lines,
                    "maxItems": lines,
                }
            },
            "required": ["lines"],
        },
        fn=write,
    )


def reader(output_words: int) -> Tool:
    """A tool whose result is ``output_words`` words long."""

    def read(path: str) -> str:
        return " ".join(f"{path}-{i}" for i in range(output_words))

    return Tool(
        name="read",
        description="Read a file.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        fn=read,
    )


def run_sessions(
    *,
    seed: int,
    rounds: list[int],
    reply_lines: int,
    calls_per_turn: tuple[int, int],
    answer_tokens: tuple[int, int],
    output_words: int | None,
    concurrency: int,
) -> list[SessionResult]:
    """One fleet of sessions (one per entry of ``rounds``: its tool rounds) on a fresh
    simulator, in virtual time, with a fingerprinting budget; without ``output_words``
    the model has only the writing tool."""

    async def main() -> list[SessionResult]:
        engine = Engine(
            PROFILE,
            seed=seed,
            textgen=TextGenConfig(
                tool_rounds=0, answer_tokens=answer_tokens, tool_calls_per_turn=calls_per_turn
            ),
        )
        transport = SimTransport(EngineDriver(engine))
        context = ContextChain([ContextBudget(window=1_000_000), PrefixIndex()])
        tools = [writer(reply_lines)]
        if output_words is not None:
            tools.append(reader(output_words))
        sessions = []
        for i, n in enumerate(rounds):
            params: dict[str, Any] = {"max_tokens": 4096, "agentflow_tool_rounds": n}
            agent = Agent(
                name=f"agent-{i % 2}",
                model="sim",
                instructions="You edit a repository. Follow the style guide. " * 40,
                tools=tools,
                params=params,
                max_turns=n + 2,
                context=context,
            )
            sessions.append(agent.session(f"Task {i}: fix module {i}."))
        try:
            fleet = Fleet(transport, max_concurrency=concurrency, clock=loop_clock)
            result = await fleet.run(sessions)
        finally:
            await transport.aclose()
        return result.sessions

    return run_virtual(main())


def test_the_maximum_includes_the_previous_reply() -> None:
    """Long tool-call replies: the server serves them from its cache on the next turn, and
    the client's maximum counts them — on every turn at most one of the server's blocks
    (16 tokens) above the server's figure, never below; so the efficiency is just under
    100% (nothing busts this cache, nothing is evicted) without any maximum raised."""
    (result,) = run_sessions(
        seed=5,
        rounds=[6],
        reply_lines=120,
        calls_per_turn=(1, 1),
        answer_tokens=(200, 400),
        output_words=None,
        concurrency=1,
    )
    assert result.ok and len(result.turns) == 7
    for prev, turn in itertools.pairwise(result.turns):
        assert turn.prompt is not None and turn.prompt.max_cacheable_tokens is not None
        cached, reply = turn.metrics.cached_tokens, prev.metrics.output_tokens
        assert cached is not None and prev.metrics.prompt_tokens is not None
        # The previous reply (hundreds of tokens) was served from the cache …
        assert reply > 200 and cached > prev.metrics.prompt_tokens + reply - 16
        # … and the client's maximum counts it too.
        assert 0 <= turn.prompt.max_cacheable_tokens - cached < 16
    reuse = prefix_reuse([result]).fleet
    assert reuse.turns_raised == 0 and reuse.note == ""
    assert reuse.efficiency is not None and 0.99 <= reuse.efficiency <= 1.0


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    seed=st.integers(0, 2**16),
    rounds=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    reply_lines=st.integers(1, 200),
    calls=st.integers(1, 3),
    answer=st.integers(1, 600),
    output_words=st.integers(1, 300),
    concurrency=st.integers(1, 3),
)
def test_efficiency_never_exceeds_one(
    seed: int,
    rounds: list[int],
    reply_lines: int,
    calls: int,
    answer: int,
    output_words: int,
    concurrency: int,
) -> None:
    """Over random sessions — turn counts, reply lengths, tool calls per turn, tool output
    sizes, sessions racing each other — the efficiency is at most 100%, per agent and for
    the fleet. Not only because a short maximum is raised to the server's figure: on
    every turn after a session's first, the client's own maximum is at least the server's
    cached tokens (a session's first turn reuses another session's prefix, converted by
    the whole-prompt ratio, and may be raised)."""
    results = run_sessions(
        seed=seed,
        rounds=rounds,
        reply_lines=reply_lines,
        calls_per_turn=(1, calls),
        answer_tokens=(answer, answer + 50),
        output_words=output_words,
        concurrency=concurrency,
    )
    assert all(r.ok for r in results), [r.error for r in results]
    for result in results:
        for turn in result.turns[1:]:
            assert turn.prompt is not None and turn.prompt.max_cacheable_tokens is not None
            assert turn.metrics.cached_tokens is not None
            assert turn.metrics.cached_tokens <= turn.prompt.max_cacheable_tokens
    report = prefix_reuse(results)
    for figures in (report.fleet, *report.per_agent.values()):
        assert figures.turns_compared == figures.turns
        assert figures.efficiency is None or figures.efficiency <= 1.0
        assert figures.compared_cached_tokens <= figures.compared_max_cacheable_tokens
        assert figures.turns_raised <= figures.sessions
