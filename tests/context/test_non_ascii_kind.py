"""Text in other scripts is a content kind of its own: counted as prose it got prose's
learnt ratio (~1.0) and only the floor's margin, while SmolLM2 charges 1.15–1.37× the
cl100k count for CJK, Cyrillic or emoji, and a prompt over the window went out
(llama.cpp: 8,824 tokens for a bound of 8,182 in a window of 8,192)."""

from __future__ import annotations

import random
from typing import Any

from agentflow import TurnTrace
from agentflow.context import (
    KINDS,
    Calibrator,
    ContextBudget,
    MessageCounter,
    PromptShape,
    TiktokenCounter,
    content_kind,
)
from agentflow.transport import ChatRequest

from .budget_util import trace

RNG = random.Random(1)
WORDS = "the agent reads files and then writes a short report about what it found".split()
CJK = "".join(chr(RNG.randrange(0x4E00, 0x9FA0)) for _ in range(4000))
CYRILLIC = " ".join(
    "".join(chr(RNG.randrange(0x430, 0x44F)) for _ in range(RNG.randrange(3, 9)))
    for _ in range(800)
)
EMOJI = "".join(chr(RNG.randrange(0x1F600, 0x1F64F)) for _ in range(800))
#: What the synthetic server charges per cl100k token of a non-ASCII message (SmolLM2:
#: 1.15–1.37), and for its template.
RATIO, TEMPLATE = 1.3, 20


def prose(n: int) -> str:
    return " ".join(RNG.choice(WORDS) for _ in range(n))


def test_other_scripts_are_their_own_kind() -> None:
    for text in (CJK[:600], CYRILLIC[:1500], EMOJI[:300], "Привет, мир! " * 20):
        assert content_kind(text) == "non_ascii", text[:40]
    # Accented Latin text stays prose; a few words of another script in English too.
    assert content_kind("Le café était fermé, à côté de l'église où j'ai dîné. " * 5) == "prose"
    assert content_kind("Die Größe der Straße ist für Übungen gut geeignet. " * 5) == "prose"
    assert content_kind(prose(200) + " 你好 " + prose(200)) == "prose"
    assert KINDS[-1] == "non_ascii"  # added last: older shapes and states keep their order
    # A shape of the four kinds before it is padded with none of it.
    assert PromptShape((10, 0, 0, 5)).kinds == (10, 0, 0, 5, 0)


def served(counter: MessageCounter, messages: list[dict[str, Any]]) -> int:
    """The synthetic server's count: the local one for ASCII messages, RATIO× for others."""
    total = TEMPLATE
    for m in messages:
        n = counter.count_message(m)
        total += n if str(m["content"]).isascii() else round(RATIO * n)
    return total


async def _never(request: ChatRequest) -> TurnTrace:
    raise AssertionError("no overflow policy runs")


async def test_the_bound_covers_a_growth_of_another_script() -> None:
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(window=100_000, reserve_output=8, margin=0, calibrator=Calibrator())
    ctx: Any = budget.bind(session_id="s", agent="a", emit=lambda e: None, model="m")
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": prose(40)}]
    # Prose turns: prose's ratio (1.0) is learnt, and its errors are nil.
    for t in range(8):
        await ctx.before_turn(t, msgs, (), _never)
        ctx.after_turn(t, trace("ok", prompt=served(counter, msgs), output=1))
        msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": prose(60)}]
    turn = 8
    for text in (CJK[:2500], CYRILLIC[:3000], EMOJI[:600]):
        msgs.append({"role": "user", "content": text})
        await ctx.before_turn(turn, msgs, (), _never)
        forecast = ctx.forecast
        reported = served(counter, msgs)
        # As prose the growth got ~1.0× and a 32-token margin: the bound was ~0.75× the
        # growth's cost short. As its own kind it takes the prior until learnt.
        assert forecast.bound >= reported, (text[:20], forecast, reported)
        assert forecast.kind == "non_ascii", forecast
        ctx.after_turn(turn, trace("ok", prompt=reported, output=1))
        msgs.append({"role": "assistant", "content": "ok"})
        turn += 1
    stats = budget.calibrator.stats("m")
    assert stats is not None and abs(stats.kind_ratios["non_ascii"] - RATIO) < 0.02, stats
    # Learnt: the next growth is forecast at its own ratio, not padded by the prior.
    msgs.append({"role": "user", "content": CJK[2500:3500]})
    await ctx.before_turn(turn, msgs, (), _never)
    reported = served(counter, msgs)
    assert ctx.forecast.kind_learnt and ctx.forecast.bound >= reported
    assert abs(ctx.forecast.tokens - reported) <= 0.01 * reported


def test_a_state_saved_before_the_kind_existed_still_loads() -> None:
    """A run stored with four kinds resumes: the new kind has learnt nothing."""
    cal = Calibrator()
    anchor = None
    for n in (400, 500, 650, 800):
        shape = PromptShape((n, 0, 0, 0), anchor, (n - anchor[0], 0, 0, 0) if anchor else ())
        cal.observe("m", n, n + 20, shape=shape)
        anchor = (n, n + 20)
    state = cal.to_state()
    old = state["models"]["m"]
    old["ratios"] = old["ratios"][:4]
    old["errors"] = [row[:4] for row in old["errors"]]
    old["shapes"] = [[rep, kinds[:4], system] for rep, kinds, system in old["shapes"]]
    restored = Calibrator()
    restored.load_state(state)
    assert restored.stats("m") == cal.stats("m")
    shape = PromptShape((900, 0, 0, 0, 100), (800, 820), (0, 0, 0, 0, 100))
    assert restored.forecast("m", shape) == cal.forecast("m", shape)
