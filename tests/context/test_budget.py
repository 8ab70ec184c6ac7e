"""ContextBudget: windows, reserves, calibrated estimates, policy chains, and a fleet on the sim."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentflow import (
    AgentflowError,
    BudgetExceeded,
    ConfigError,
    ContextOverflow,
    Fleet,
    PromptInfo,
)
from agentflow.context import ContextChain, MessageCounter, TiktokenCounter
from agentflow.context._budget import ContextBudget
from agentflow.context._calibration import Calibrator
from agentflow.context._compact import Compact
from agentflow.context._events import CompactionEvent, ContextTrimmedEvent
from agentflow.context._fleet_budget import FleetBudget
from agentflow.context._history import check_pairing
from agentflow.context._overflow import DropOldest, Fail, OverflowView, TruncateToolOutputs
from agentflow.context._windows import KNOWN_WINDOWS, window_for

from .budget_util import (
    LONG_WORDS,
    Completer,
    ReadFile,
    bind_indexed,
    conversation,
    prompt_tokens,
    sim_agent,
    simulator,
    trace,
)


def bind(budget: ContextBudget, events: list[Any] | None = None, **kw: Any) -> Any:
    sink = events if events is not None else []
    return budget.bind(session_id="s-1", agent="a", emit=sink.append, **kw)


def test_windows_of_known_models() -> None:
    assert window_for("gpt-4o") == 128_000
    assert window_for("openai/gpt-4o-mini-2024-07-18") == 128_000
    assert window_for("deepseek-v4.1-flash") == 1_000_000  # the deployment's --max-model-len
    assert window_for("DeepSeek-V4") == 131_072
    assert window_for("unknown-model") is None
    assert max(KNOWN_WINDOWS.values()) <= 1_048_576
    # A family member with a smaller window than its family's is not the family's.
    assert window_for("o1-mini") == window_for("o1-preview-2024-09-12") == 128_000
    assert window_for("o1-2024-12-17") == 200_000
    assert window_for("gpt-3.5-turbo-instruct") == 4_096
    assert window_for("gpt-3.5-turbo-0125") == 16_385


def test_window_reserve_margin_and_limit() -> None:
    ctx = bind(ContextBudget(window=10_000, reserve_output=500, margin=100))
    assert (ctx.window, ctx.reserve, ctx.margin, ctx.limit) == (10_000, 500, 100, 9_400)
    # The reserve defaults to the agent's max_tokens, the margin may be a fraction.
    ctx = bind(ContextBudget(model="gpt-4o", margin=0.05), params={"max_tokens": 2048})
    assert (ctx.window, ctx.reserve, ctx.margin) == (128_000, 2048, 6_400)
    ctx = bind(ContextBudget(window=2000), params={"max_completion_tokens": 300})
    assert ctx.reserve == 300
    ctx = bind(ContextBudget(window=2000, margin=0))
    assert ctx.reserve == 500 and ctx.limit == 1500  # min(1024, window // 4)
    # The session's model picks the window when the budget has none.
    assert bind(ContextBudget(), model="deepseek-v4").window == 131_072


def test_reserve_is_never_below_the_agents_max_tokens() -> None:
    # reserve_output=64 with max_tokens=512 let prompts through that a vLLM-style server
    # refuses (prompt + max_tokens > window): the session sends 512, so 512 is reserved.
    ctx = bind(ContextBudget(window=2048, reserve_output=64, margin=0), params={"max_tokens": 512})
    assert (ctx.reserve, ctx.limit) == (512, 1536)
    both = {"max_tokens": 100, "max_completion_tokens": 300}
    assert bind(ContextBudget(window=2048, reserve_output=64), params=both).reserve == 300
    # A larger reserve_output stays.
    ctx = bind(ContextBudget(window=2048, reserve_output=800), params={"max_tokens": 512})
    assert ctx.reserve == 800


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window": 0}, r"ContextBudget\.window must be an int ≥ 1, got 0"),
        ({"model": "nope"}, r"ContextBudget\.model 'nope' has no known window"),
        ({"window": 10, "reserve_output": -1}, r"ContextBudget\.reserve_output"),
        ({"window": 10, "margin": -1}, r"ContextBudget\.margin"),
        ({"window": 10, "margin": 1.5}, r"ContextBudget\.margin"),
        ({"window": 10, "pin_first": -1}, r"ContextBudget\.pin_first"),
        ({"window": 10, "overflow": [3]}, r"ContextBudget\.overflow: 3 is not a policy"),
        ({"window": 10, "fleet": object()}, r"ContextBudget\.fleet must be a FleetBudget"),
        ({"model": 123}, r"ContextBudget\.model must be a non-empty string, got 123"),
        ({"window": 10, "overflow": [DropOldest]}, r"DropOldest is a class; give a policy"),
        ({"window": 10, "overflow": Fail}, r"Fail is a class; give a policy: Fail\(\)"),
        # Neither a policy nor a sequence of them: a bare TypeError from tuple() before.
        ({"window": 10, "overflow": None}, r"ContextBudget\.overflow must be a policy or a seq"),
        ({"window": 10, "overflow": 5}, r"ContextBudget\.overflow must be a policy or a seq"),
        ({"window": 10, "overflow": "fail"}, r"ContextBudget\.overflow must be a policy or a seq"),
    ],
)
def test_config_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ContextBudget(**kwargs)


def test_bind_errors() -> None:
    with pytest.raises(ConfigError, match="leaves no room"):
        bind(ContextBudget(window=1000, reserve_output=1000))
    # A max_tokens no server takes (Agent refuses it) reserves the default, not -5.
    for odd in (-5, 0, 4096.0):
        assert bind(ContextBudget(window=1000, margin=0), params={"max_tokens": odd}).reserve == 250
    with pytest.raises(ConfigError, match="no window for model 'mystery'"):
        bind(ContextBudget(), model="mystery")


async def never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def test_estimates_are_calibrated_by_reported_prompt_tokens() -> None:
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(window=100_000, counter=counter)
    ctx = bind(budget, model="m")
    msgs = conversation(1)
    info = await ctx.before_turn(0, msgs, (), never)
    raw = counter.count_prompt(msgs)
    assert info == PromptInfo(estimated_tokens=raw, raw_estimate=raw)
    # The server counts 1.5× what we do (another tokenizer), plus a 20-token template.
    ctx.after_turn(0, trace(prompt=int(raw * 1.5) + 20, output=5))
    for turn in range(1, 5):
        msgs += conversation(turn + 1)[-2:]
        info = await ctx.before_turn(turn, msgs, (), never)
        reported = int(info.raw_estimate * 1.5) + 20
        if turn >= 3:  # enough turns for the fit: slope and offset
            assert abs(info.estimated_tokens - reported) <= 2
        ctx.after_turn(turn, trace(prompt=reported, output=5))
    stats = budget.calibrator.stats("m")
    assert stats is not None and stats.samples == 5
    # The calibrator is shared: a new session of the same model starts calibrated.
    other = bind(budget, model="m")
    info = await other.before_turn(0, conversation(1), (), never)
    assert info.estimated_tokens == pytest.approx(info.raw_estimate * 1.5 + 20, abs=2)
    # Turns without usage teach nothing.
    other.after_turn(0, trace("no usage"))
    assert budget.calibrator.stats("m").samples == 5  # type: ignore[union-attr]


async def test_a_turn_counts_only_the_new_messages() -> None:
    counter = MessageCounter(TiktokenCounter())
    ctx = bind(ContextBudget(window=1_000_000, counter=counter))
    msgs = conversation(50)
    await ctx.before_turn(0, msgs, (), never)
    misses = counter.misses
    for turn in range(1, 6):
        msgs += conversation(1)[-2:]
        msgs[-1] = {**msgs[-1], "content": f"new output {turn}"}
        await ctx.before_turn(turn, msgs, (), never)
    # Each turn tokenized its one new tool result (the repeated call message was cached).
    assert counter.misses - misses == 5


class FakeIndex:
    """A prefix index that says every message but the last was seen before."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def session(self) -> FakeIndex:
        return self

    def observe(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> int:
        self.seen.append(len(messages))
        return 16 * (len(messages) - 1)


async def test_max_cacheable_tokens_come_from_the_prefix_index() -> None:
    index = FakeIndex()
    ctx, _ = bind_indexed(ContextBudget(window=100_000), index)
    info = await ctx.before_turn(0, conversation(2), (), never)
    assert info.max_cacheable_tokens == 16 * 6 and index.seen == [7]
    # After a policy ran, the index sees the prompt as it is sent.
    ctx, _ = bind_indexed(
        ContextBudget(window=400, reserve_output=10, overflow=DropOldest(),
                      calibrator=Calibrator(floor=0, prior=0)),  # no error margin: exact sums
        index,
    )  # fmt: skip
    info = await ctx.before_turn(0, conversation(4, 100), (), never)
    assert index.seen[-1] < 11 and info.max_cacheable_tokens == 16 * (index.seen[-1] - 1)
    # Calibrated like the estimate: in the server's tokens.
    ctx.after_turn(0, trace(prompt=2 * info.raw_estimate, output=1))
    info = await ctx.before_turn(1, conversation(1), (), never)
    assert info.estimated_tokens == 2 * info.raw_estimate
    assert info.max_cacheable_tokens == 2 * 16 * (index.seen[-1] - 1)


async def test_a_chain_runs_until_the_prompt_fits_and_reports_each_step() -> None:
    msgs = conversation(12, output_words=400)
    prefix = copy.deepcopy(msgs[:2])
    events: list[Any] = []
    completer = Completer("summary of the work so far")
    budget = ContextBudget(
        window=2600, reserve_output=100, margin=0, pin_first=1,
        overflow=[TruncateToolOutputs(max_tokens=300), Compact(keep_last=1), Fail()],
    )  # fmt: skip
    ctx = bind(budget, events, model="m")
    info = await ctx.before_turn(7, msgs, (), completer)
    assert info.estimated_tokens <= ctx.limit == 2500
    assert msgs[:2] == prefix and check_pairing(msgs) is None
    trimmed = [e for e in events if isinstance(e, ContextTrimmedEvent)]
    assert [e.policy for e in trimmed] == ["truncate_tool_outputs", "compact"]
    assert trimmed[0].tokens_before > trimmed[0].tokens_after == trimmed[1].tokens_before
    # Events compare the estimate plus its calibrated error margin with the limit.
    assert ctx.forecast is not None and ctx.forecast.tokens == info.estimated_tokens
    assert trimmed[1].tokens_after == ctx.forecast.bound and trimmed[1].limit == 2500
    assert trimmed[1].messages_after == 5 and trimmed[1].turn == 7
    (compaction,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert compaction.messages_summarised == trimmed[1].messages_before - 4
    assert msgs[2]["content"].endswith("summary of the work so far")


async def test_the_chain_stops_at_the_first_policy_that_makes_it_fit() -> None:
    msgs = conversation(4, output_words=100)
    events: list[Any] = []
    budget = ContextBudget(window=450, reserve_output=50, margin=0, pin_first=1,
                           overflow=[DropOldest(target=1.0), Compact()])  # fmt: skip
    ctx = bind(budget, events)
    await ctx.before_turn(1, msgs, (), never)  # Compact would call the model: it must not run
    assert [e.policy for e in events] == ["drop_oldest"]


async def test_overflow_when_no_policy_helps() -> None:
    msgs = conversation(2, output_words=300)
    budget = ContextBudget(window=400, reserve_output=50, margin=10, overflow=DropOldest())
    ctx = bind(budget)
    with pytest.raises(ContextOverflow) as info:
        await ctx.before_turn(2, msgs, (), never)
    err = info.value
    assert err.session_id == "s-1" and err.limit == 400 and err.tokens > 400
    assert "more than the 400-token window" in str(err)


async def test_a_policy_may_not_break_the_prefix_or_the_pairing() -> None:
    async def orphan_maker(view: OverflowView) -> bool:
        del view.messages[view.pinned]  # the assistant call: its results become orphans
        return True

    async def prefix_editor(view: OverflowView) -> bool:
        view.messages[0] = {"role": "system", "content": "changed"}
        return True

    for policy, match in ((orphan_maker, "broke tool-call pairing"), (prefix_editor, "prefix")):
        budget = ContextBudget(
            window=300, reserve_output=10, margin=0, overflow=policy, pin_first=1
        )
        with pytest.raises(AgentflowError, match=f"'{policy.__name__}' .*{match}"):
            await bind(budget).before_turn(0, conversation(3, 200), (), never)


async def test_the_pinned_boundary_freezes_once_a_policy_ran() -> None:
    # A summary with the system role must not join the pinned prefix.
    msgs = conversation(6, output_words=120)
    completer = Completer("sum")
    policy = Compact(role="system", keep_last=1, max_summary_tokens=64)
    budget = ContextBudget(window=1200, reserve_output=50, margin=0, overflow=policy)
    ctx = bind(budget, model="m")
    await ctx.before_turn(0, msgs, (), completer)
    assert [m["role"] for m in msgs[:3]] == ["system", "system", "assistant"]
    msgs += conversation(6, output_words=120)[2:]
    await ctx.before_turn(1, msgs, (), completer)
    assert "sum" in completer.requests[1].messages[1]["content"]  # the summary was summarised
    assert [m["role"] for m in msgs[:2]] == ["system", "system"] and msgs[2]["role"] == "assistant"


async def test_fleet_budget_stops_turns_and_counts_compactions() -> None:
    fleet = FleetBudget(max_tokens=1000)
    events: list[Any] = []
    completer = Completer("s")
    budget = ContextBudget(window=600, reserve_output=50, margin=0, overflow=Compact(keep_last=1))
    chain = ContextChain([fleet, budget])
    ctx = chain.bind(session_id="s-1", agent="a", emit=events.append, model="m", params={})
    await ctx.before_turn(0, conversation(6, output_words=120), (), completer)
    assert fleet.requests == 1 and fleet.tokens == 101  # the summary call: 100 + 1
    ctx.after_turn(0, trace(prompt=850, output=60))
    assert fleet.tokens == 1011
    with pytest.raises(BudgetExceeded) as info:
        await ctx.before_turn(1, conversation(1), (), never)
    assert info.value.budget == "tokens"
    assert [e.exceeded for e in events if e.type == "budget"][-1]


def test_calibrator_is_shared_per_budget() -> None:
    cal = Calibrator()
    budget = ContextBudget(window=1000, calibrator=cal)
    assert budget.calibrator is cal and ContextBudget(window=1000).calibrator is not cal


# --- end to end on the simulator, over real HTTP --------------------------------------------


async def test_calibration_on_the_simulator_converges_to_its_prompt_tokens() -> None:
    # Long words: the simulator's tokenizer spends ~2.5× the tokens cl100k does on them.
    budget = ContextBudget(window=4096, reserve_output=48)
    tool = ReadFile([], 60, vocab=LONG_WORDS)
    async with simulator() as (_, transport):
        agent = sim_agent(budget, tool, rounds=8)
        result = await Fleet(transport).run([agent.session("Fix the bug in cache.py")])
    session = result.sessions[0]
    assert session.status == "completed", session.error
    reported = prompt_tokens(session)
    infos = [t.prompt for t in session.turns]
    assert all(isinstance(i, PromptInfo) for i in infos)
    raw_err = [abs(i.raw_estimate - r) / r for i, r in zip(infos, reported, strict=True) if i]
    err = [abs(i.estimated_tokens - r) / r for i, r in zip(infos, reported, strict=True) if i]
    assert min(raw_err[3:]) > 0.3  # uncorrected, the estimate is far off
    assert max(err[4:]) < 0.02  # corrected, within 2% once a few turns were seen
    stats = budget.calibrator.stats(agent.model)  # the session passes its agent's model
    assert stats is not None and stats.samples == len(session.turns) and stats.slope > 1.5
