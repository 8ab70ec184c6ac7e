"""The anchor is the prompt as sent, not the prompt followed by the reply.

After a turn the budget does two things with the same per-session counter: it anchors the
next estimate on the server's count of the prompt, and it fingerprints the prompt
*followed by the reply* (servers cache what they generate). Done in the other order, the
anchor's local count included the reply while the server's did not, the content-kind
tally never saw the assistant messages, and the learnt ratio came out high by the
replies' share of the growth (1.056 for ~60-token replies between 1,000-token tool
outputs, with a server whose count equals the local one). The whole-prompt forecast then
overshot by as much, and ``TruncateToolOutputs(all=False)`` stopped cutting short of what
the budget's check asked for: ``ContextOverflow`` with outputs still uncut.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentflow import ContextOverflow, ToolCall, TurnTrace, Usage
from agentflow.context import (
    ContextBudget,
    ContextTrimmedEvent,
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
    TruncateToolOutputs,
)

from .budget_util import bind_indexed

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
VOCAB = [f"w{i}" for i in range(2_000)] + ["the", "cache", "returns", "None", "when"]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(words))


def reply(rng: random.Random, i: int) -> dict[str, Any]:
    """The model's reply: a little text and a tool call."""
    return {
        "role": "assistant",
        "content": text(rng, 30),
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'},
            }
        ],
    }


def trace(message: dict[str, Any], prompt_tokens: int, completion: int) -> TurnTrace:
    call = message["tool_calls"][0]
    return TurnTrace(
        endpoint="test", model="m", response_id="r", sent_ns=0, headers_ns=1, end_ns=2,
        chunk_ns=(1,), chunk_chars=(1,), chunk_tokens=(1,), tokens_exact=False, n_events=2,
        content=message["content"], reasoning="", finish_reason="tool_calls", done=True,
        tool_calls=(ToolCall(index=0, id=call["id"], name=call["function"]["name"],
                             arguments=call["function"]["arguments"]),),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion),
    )  # fmt: skip


class Session:
    """A tool-calling session under a budget, with a server that counts ``scale`` × the
    local count of every prompt (1.0: a tokenizer that agrees with cl100k)."""

    def __init__(
        self, budget: ContextBudget, index: PrefixIndex, *, output_words: int, scale: float = 1.0
    ) -> None:
        self.rng = random.Random(7)
        self.counter = budget.counter
        self.events: list[Any] = []
        # The chain [budget, index], as an agent binds it; budget_ctx is the budget's session.
        self.ctx, self.budget_ctx = bind_indexed(
            budget, index, emit=self.events.append, session_id="s", model="m"
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": text(self.rng, 100)},
        ]
        self.output_words, self.scale, self.turn = output_words, scale, 0
        self.next_reply = reply(self.rng, 0)
        self.forecasts: list[tuple[int, int]] = []  # (forecast tokens, what the server said)

    async def step(self) -> None:
        self.messages.append(self.next_reply)
        self.messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{self.turn}",
                "content": text(self.rng, self.output_words),
            }
        )
        info = await self.ctx.before_turn(self.turn, self.messages, TOOLS, _never)
        reported = round(self.scale * info.raw_estimate)
        self.forecasts.append((info.estimated_tokens, reported))
        self.next_reply = reply(self.rng, self.turn + 1)
        completion = self.counter.count_message(self.next_reply)
        self.ctx.after_turn(self.turn, trace(self.next_reply, reported, completion))
        self.turn += 1


async def _never(request: Any) -> Any:
    raise AssertionError("no model call expected")


@pytest.mark.parametrize("scale", [1.0, 1.25])
async def test_the_anchored_forecast_is_exact_for_a_server_that_scales_the_count(
    scale: float,
) -> None:
    """With the prefix index fingerprinting each reply, the anchored forecast of every
    later prompt equals the server's count (to rounding), and the learnt ratio is the
    server's scale — the replies are in the growth."""
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(window=1_000_000, counter=counter)
    session = Session(budget, PrefixIndex(counter), output_words=800, scale=scale)
    for _ in range(12):
        await session.step()
    # The first forecast has nothing learnt; from the second on each is anchored.
    for forecast, reported in session.forecasts[2:]:
        assert abs(forecast - reported) <= 2, session.forecasts
    stats = budget.calibrator.stats("m")
    assert stats is not None
    for kind, ratio in stats.kind_ratios.items():
        assert ratio == pytest.approx(scale, rel=0.005), (kind, stats.kind_ratios)


async def test_truncation_until_it_fits_cuts_until_the_budgets_check_passes() -> None:
    """``all=False`` near the window, with the server reporting every turn: every turn
    is sent inside the limit, and the session overflows only once every output is cut."""
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(
        window=30_000,
        reserve_output=1_024,
        counter=counter,
        overflow=TruncateToolOutputs(max_tokens=256, all=False),
    )
    session = Session(budget, PrefixIndex(counter), output_words=700)
    policy = TruncateToolOutputs(max_tokens=256)

    async def until_overflow() -> None:
        for _ in range(200):
            await session.step()
            assert session.budget_ctx.forecast is not None
            assert session.budget_ctx.forecast.bound <= session.budget_ctx.limit

    with pytest.raises(ContextOverflow):
        await until_overflow()
    cut = [e for e in session.events if isinstance(e, ContextTrimmedEvent)]
    assert len(cut) > 5  # it cut on many turns before the end
    outputs = [m["content"] for m in session.messages if m["role"] == "tool"]
    assert all(policy.was_cut(o) for o in outputs[:-1])  # nothing left to cut but the newest
