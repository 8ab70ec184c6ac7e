"""TruncateToolOutputs keeps the prefix cacheable: on the simulator (in-process, virtual
time, vLLM's block-level prefix cache), a session held inside its window by truncation
sends byte-identical prefixes from turn to turn and the server's cached tokens stay high."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agentflow import Agent, Fleet, SessionResult, Tool, TurnTrace
from agentflow.context import ContextBudget, PrefixIndex, TruncateToolOutputs
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink

from .budget_util import INSTRUCTIONS, SIM_PROFILE, prose

WINDOW = 65_536
ROUNDS = 80
#: ~1,900 of the simulator's tokens per output: the window holds ~33 of them.
OUTPUT_WORDS = 1_500
PROFILE = dataclasses.replace(SIM_PROFILE, max_model_len=WINDOW)


class Recording:
    """A transport that keeps each request's messages, as JSON text per message."""

    def __init__(self, inner: SimTransport) -> None:
        self.inner = inner
        self.sent: list[list[str]] = []

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        self.sent.append([json.dumps(m, sort_keys=True) for m in request.messages])
        return await self.inner.stream(request, sink)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclasses.dataclass
class Run:
    session: SessionResult
    sent: list[list[str]]
    trimmed: list[int]  # the turns a policy changed the history on

    @property
    def prompts(self) -> list[int]:
        return [t.trace.usage.prompt_tokens or 0 for t in self.session.turns if t.trace.usage]

    @property
    def cached(self) -> list[int]:
        return [t.trace.usage.cached_tokens or 0 for t in self.session.turns if t.trace.usage]

    @property
    def hit_rate(self) -> float:
        return sum(self.cached) / sum(self.prompts)


def run(policy: TruncateToolOutputs) -> Run:
    calls = 0

    def read_file(path: str) -> str:
        """Read a file of the repository.

        Args:
            path: the file's path.
        """
        nonlocal calls
        calls += 1
        return prose(OUTPUT_WORDS, start=13 * calls)

    async def main() -> Run:
        engine = Engine(PROFILE, seed=3, textgen=TextGenConfig(answer_tokens=(8, 24)))
        transport = Recording(SimTransport(EngineDriver(engine)))
        budget = ContextBudget(
            window=WINDOW,
            reserve_output=48,
            margin=0.02,
            pin_first=1,
            overflow=policy,
        )
        agent = Agent(
            name="coder",
            model=PROFILE.model,
            instructions=INSTRUCTIONS,
            tools=[Tool.from_function(read_file, in_thread=False)],
            params={"max_tokens": 48, "agentflow_tool_rounds": ROUNDS},
            max_turns=ROUNDS + 5,
            context=[budget, PrefixIndex()],
        )
        events: list[Any] = []
        fleet = Fleet(transport, callbacks=[events.append], clock=loop_clock)
        try:
            result = await fleet.run([agent.session("Fix the bug in cache.py", session_id="s")])
        finally:
            await transport.aclose()
        trimmed = sorted({e.turn for e in events if e.type == "context_trimmed"})
        return Run(result.sessions[0], transport.sent, trimmed)

    return run_virtual(main())


def test_truncation_cuts_rarely_and_keeps_every_prefix_byte_identical() -> None:
    """Held inside its window by the default policy, a session's every request extends the
    previous one byte for byte except on a few sweeps, which change nothing but outputs
    they cut; the server serves ≥ 90% of all prompt tokens from its prefix cache."""
    policy = TruncateToolOutputs(max_tokens=64)
    r = run(policy)
    assert r.session.status == "completed", r.session.error
    turns = len(r.sent)
    assert turns == ROUNDS + 1 and max(r.prompts) <= WINDOW - 48
    # Cut in a few sweeps (each cuts every long output), not a little on every turn.
    assert 2 <= len(r.trimmed) <= turns // 10, r.trimmed
    for k in range(1, turns):
        before, now = r.sent[k - 1], r.sent[k]
        assert len(now) > len(before)  # truncation never removes a message
        if k not in r.trimmed:
            # Append-only: the whole previous request is this one's prefix, byte for byte.
            assert now[: len(before)] == before, f"turn {k}"
            # And the server served it from its cache: every full block of it.
            assert r.cached[k] >= r.prompts[k - 1] // 16 * 16, f"turn {k}"
        else:
            # A sweep changes only outputs it cuts now; what was cut before stays exactly
            # as it was cut.
            for i, msg in enumerate(before):
                if now[i] != msg:
                    old, new = json.loads(msg), json.loads(now[i])
                    assert old["role"] == new["role"] == "tool", f"turn {k}, message {i}"
                    assert not policy.was_cut(old["content"]) and policy.was_cut(new["content"])
    # Measured: 93.8% of all prompt tokens came from the server's prefix cache (each
    # turn adds ~1,900 new tokens of output to an average prompt of ~30k).
    assert r.hit_rate >= 0.9, r.hit_rate


def test_cutting_only_until_it_fits_misses_the_cache_on_every_turn() -> None:
    """The trade-off ``all=False`` makes: less output cut, but once at the window it cuts
    an older output on (nearly) every turn and the cache misses from there (measured: 36% of the
    prompt tokens cached over the run, 15% of them from the turn after the first cut)."""
    r = run(TruncateToolOutputs(max_tokens=64, all=False))
    assert r.session.status == "completed", r.session.error
    first = r.trimmed[0]
    # On nearly every turn from the first overflow (a turn that had to cut a second
    # output to pass the budget's check may leave room for the next one).
    after = range(first, len(r.sent))
    assert set(r.trimmed) <= set(after) and len(r.trimmed) >= 0.8 * len(after), r.trimmed
    late = range(first + 1, len(r.sent))
    late_rate = sum(r.cached[k] for k in late) / sum(r.prompts[k] for k in late)
    assert late_rate < 0.25, late_rate
    assert r.hit_rate < 0.5, r.hit_rate
