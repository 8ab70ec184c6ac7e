"""A ``TruncateToolOutputs`` sweep near the window, counted: on the turn that cuts, no
long output's head is tokenized (its first ids were kept from its count), the prompt's
count and fingerprint equal a fresh counter's from scratch; on later turns nothing cut
is cut or tokenized again and the cut prefix stays cacheable; the next sweep starts
after the last one. Counted by what tiktoken is handed, never timed.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from agentflow.context import (
    ContextBudget,
    ContextTrimmedEvent,
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
    TruncateToolOutputs,
)
from agentflow.context._messages import _RECENT_IDS

from .budget_util import bind_indexed, trace
from .tool_history import TOOLS

MAX_TOKENS = 100
#: Words of one tool output: ~2,600 cl100k tokens.
OUTPUT_WORDS = 1_500


class Session:
    """One session under ``ContextBudget(overflow=TruncateToolOutputs(...))``, each turn a
    tool call and its output, the server reporting the local count (as a server whose
    tokenizer agrees would) so that the calibrated margin is learnt."""

    def __init__(self, window: int) -> None:
        self.rng = random.Random(3)
        self.vocab = [
            "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(k))
            for k in (2, 3, 4, 5, 6, 7, 8) * 40
        ]
        self.events: list[Any] = []
        self.policy = TruncateToolOutputs(max_tokens=MAX_TOKENS)
        budget = ContextBudget(
            window=window,
            reserve_output=1_000,
            overflow=self.policy,
        )
        # The chain [budget, index], as an agent binds it; budget_ctx is the budget's session.
        self.ctx, self.budget_ctx = bind_indexed(
            budget, PrefixIndex(), emit=self.events.append, session_id="s"
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You read files."},
            {"role": "user", "content": "Summarise the repository."},
        ]
        self.turn = 0

    def output(self) -> str:
        choice = self.rng.choice
        return " ".join(choice(self.vocab) for _ in range(OUTPUT_WORDS))

    def append(self, text: str | None = None) -> None:
        n = self.turn
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path": "f{n}"}}'},
                    }
                ],
            }
        )
        self.messages.append(
            {"role": "tool", "tool_call_id": f"c{n}", "content": text or self.output()}
        )

    async def step(self) -> Any:
        info = await self.ctx.before_turn(self.turn, self.messages, TOOLS, _never)
        #: The prompt's fingerprint as sent (before the reply joins it).
        tracker: Any = self.budget_ctx._tracker
        self.blocks = tracker._tracker.blocks
        self.ctx.after_turn(self.turn, trace(prompt=info.raw_estimate, output=5))
        self.turn += 1
        return info

    def sweeps(self) -> int:
        return sum(isinstance(e, ContextTrimmedEvent) for e in self.events)

    def long_outputs(self) -> list[str]:
        return [
            m["content"]
            for m in self.messages
            if m["role"] == "tool" and not self.policy.was_cut(m["content"])
        ]


async def _never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def test_a_sweep_tokenizes_each_head_once_and_later_turns_nothing_cut(
    handed: list[str],
) -> None:
    s = Session(window=60_000)
    while True:  # up to the first sweep
        s.append()
        longs = s.long_outputs()
        handed.clear()
        info = await s.step()
        if s.sweeps():
            break
    assert len(longs) >= 10
    new = longs[-1]
    cut = [m["content"] for m in s.messages if m["role"] == "tool"]
    assert all(s.policy.was_cut(c) for c in cut)  # every long output at once
    # The new output was tokenized whole, once. Of each output cut, tiktoken was handed
    # no head — the first ids of each output (over 2,048 tokens) were kept from its
    # count, and say where its first 100 tokens end — and nothing longer than a few
    # characters after it: the two counts that confirm the cut tokenize what follows a
    # space before it, and so does the cut message's render (the marker).
    assert handed.count(new) == 1
    for text in longs:
        heads = [t for t in handed if text.startswith(t) and len(t) > 64]
        assert heads == ([] if text is not new else [new]), text[:40]
    other = [t for t in handed if not any(o.startswith(t) for o in longs)]
    marker = len("\n[… 9,999 tokens of tool output cut …]")
    assert max(map(len, other)) < 64 + marker, [t for t in other if len(t) > 64 + marker]
    head_chars = sum(len(t) for t in handed if len(t) > 64 and t is not new)
    assert head_chars < 1.3 * sum(len(c) for c in cut)  # ~1.15× each head, not 3×
    # What the budget counted and fingerprinted is exact: a fresh counter and index
    # from scratch (tokenizing every message whole) agree.
    fresh = MessageCounter(TiktokenCounter())
    assert info.raw_estimate == fresh.count_prompt(s.messages, TOOLS)
    scratch = PrefixIndex().session()
    scratch.observe(s.messages, TOOLS)
    assert s.blocks == scratch.blocks

    # Later turns: append only. Nothing is cut again or tokenized again, and everything
    # sent before (the cut prefix included) stays cacheable.
    before = copy.deepcopy(s.messages)
    sent = info.raw_estimate
    short = " ".join(s.vocab[:20])  # an output below max_tokens: never cut
    assert TiktokenCounter().count(short) < MAX_TOKENS
    for _ in range(3):
        s.append(short)
        handed.clear()
        info = await s.step()
        assert s.sweeps() == 1
        assert s.messages[: len(before)] == before
        assert all(len(t) <= len(short) for t in handed)
        assert info.max_cacheable_tokens >= (sent - 3) // 16 * 16
        sent = info.raw_estimate

    # The next sweep cuts only what came since: the outputs cut before stay as they were.
    kept = copy.deepcopy(s.messages)
    while s.sweeps() == 1:
        s.append()
        await s.step()
    assert s.messages[: len(kept)] == kept
    since = [m["content"] for m in s.messages[len(kept) :] if m["role"] == "tool"]
    assert since and all(s.policy.was_cut(c) for c in since)


def test_the_counter_keeps_a_few_turns_of_token_ids(handed: list[str]) -> None:
    """The ids a fingerprint takes from the count are kept for a few turns' worth of
    tokens, not for the last 64 messages whatever their size (32 outputs of 20k tokens
    held 640k int objects, which the garbage collector walks); the newest is always
    kept, however large."""
    s = Session(window=10_000_000)
    counter = MessageCounter(TiktokenCounter())
    outputs = []
    for _ in range(60):  # ~156k tokens: more than are kept
        s.append()
        outputs.append(s.messages[-1])
        counter.count_message(s.messages[-1])
    held = sum(map(len, counter._recent.values()))
    assert 100_000 < held <= _RECENT_IDS
    handed.clear()
    counter.render(outputs[-1])  # the newest: taken, not tokenized again
    assert handed == []
    huge = {"role": "tool", "tool_call_id": "c", "content": " ".join([s.output()] * 60)}
    counter.count_message(huge)
    assert list(counter._recent) == [next(reversed(counter._recent))]  # only it is left
    handed.clear()
    assert len(counter.render(huge)) > _RECENT_IDS and handed == []
