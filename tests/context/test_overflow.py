"""Overflow policies: unit tests on fixed conversations, then each end to end on the sim."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentflow import ConfigError, ContextOverflow, Fleet, SessionResult
from agentflow.context._budget import ContextBudget
from agentflow.context._history import check_pairing, pinned_length, split_units
from agentflow.context._overflow import DropOldest, Fail, TruncateToolOutputs, policy_name

from .budget_util import (
    ReadFile,
    WordEstimator,
    conversation,
    prompt_tokens,
    sim_agent,
    simulator,
    tool_round,
    view,
    words,
)

# --- history shape ----------------------------------------------------------------------


def test_units_keep_a_tool_call_with_its_results() -> None:
    msgs = conversation(3)
    # system, user | asst(1 call), tool | asst(2 calls), tool, tool | asst(1 call), tool
    assert split_units(msgs, 2) == [(2, 4), (4, 7), (7, 9)]
    assert split_units(msgs, 0) == [(0, 1), (1, 2), (2, 4), (4, 7), (7, 9)]


def test_pinned_prefix_is_system_messages_then_the_first_n() -> None:
    msgs = conversation(2)
    assert pinned_length(msgs, 0) == 1
    assert pinned_length(msgs, 1) == 2
    # Pinning into a tool round pins the whole round: the prefix never splits a pair.
    assert pinned_length(msgs, 2) == 4
    assert pinned_length(msgs, 3) == 4
    assert pinned_length(msgs, 4) == 7
    assert pinned_length(msgs[:2], 5) == 2
    assert pinned_length([{"role": "user", "content": "hi"}], 0) == 0


def test_check_pairing_finds_orphans_and_missing_results() -> None:
    msgs = conversation(3)
    assert check_pairing(msgs) is None
    assert check_pairing(msgs[:-1]) is None  # calls still running: valid
    orphan = msgs[:2] + msgs[3:]
    assert "no call before it made" in (check_pairing(orphan) or "")
    missing = msgs[:5] + msgs[7:]  # the round with two calls lost one result
    assert "follows before their results" in (check_pairing(missing) or "")


def test_policy_names() -> None:
    async def mine(view: Any) -> bool:
        return False

    assert policy_name(Fail()) == "fail"
    assert policy_name(DropOldest()) == "drop_oldest"
    assert policy_name(TruncateToolOutputs()) == "truncate_tool_outputs"
    assert policy_name(mine) == "mine"


# --- fail ---------------------------------------------------------------------------------


async def test_fail_names_session_tokens_and_limit() -> None:
    msgs = conversation(3)
    v = view(msgs, limit=100, window=300)
    tokens = v.tokens()
    with pytest.raises(ContextOverflow) as info:
        await Fail()(v)
    err = info.value
    assert err.session_id == "s-1" and err.limit == 300 and err.tokens == tokens + 200
    assert "'s-1'" in str(err) and f"{tokens:,}" in str(err) and "300" in str(err)


# --- drop oldest --------------------------------------------------------------------------


async def test_drop_oldest_drops_whole_units_to_the_target() -> None:
    msgs = conversation(4, output_words=50)
    prefix = copy.deepcopy(msgs[:2])
    v = view(msgs, limit=200)
    assert v.tokens() > 200
    assert await DropOldest(target=0.8)(v)
    assert v.tokens() <= 160
    assert msgs[:2] == prefix
    assert check_pairing(msgs) is None
    # The newest round survived, whole.
    assert msgs[-2]["tool_calls"][0]["id"] == "r3-0" and msgs[-1]["tool_call_id"] == "r3-0"


class _Costlier(WordEstimator):
    """A whole prompt's estimate is not its messages' sum (a calibration fitted to the
    whole prompt, an anchor lost on the rewrite, a margin): dropping a message saves
    less than its own count says."""

    def prompt(self, messages: Any, tools: Any) -> int:
        return 200 + int(0.7 * super().prompt(messages, tools))


async def test_drop_oldest_reaches_the_target_by_the_whole_prompts_estimate() -> None:
    """It drops until the prompt's own estimate is at the target — the bound the budget
    checks next — not until its running sum of the messages' counts says so (which
    stopped at ~0.92 × the limit here, and above it at target=1.0)."""
    for target in (0.8, 1.0):
        msgs = conversation(8, output_words=60)
        v = view(msgs, limit=500)
        v.estimator = _Costlier()
        assert v.tokens() > 500
        assert await DropOldest(target=target)(v)
        assert v.tokens() <= int(500 * target)
        assert check_pairing(msgs) is None and len(v.units()) > 1  # it left some


async def test_drop_oldest_never_drops_the_last_units() -> None:
    msgs = conversation(2, output_words=100)
    v = view(msgs, limit=50)
    assert await DropOldest(keep_last=1)(v)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    assert not await DropOldest(keep_last=1)(v)  # nothing left it may drop
    assert not await DropOldest(keep_last=2)(view(conversation(2), limit=10))


async def test_drop_oldest_does_nothing_when_it_fits() -> None:
    msgs = conversation(2)
    assert not await DropOldest(target=1.0)(view(msgs, limit=10_000))
    assert len(msgs) == 7


def test_drop_oldest_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"DropOldest\.target"):
        DropOldest(target=0)
    with pytest.raises(ConfigError, match=r"DropOldest\.keep_last"):
        DropOldest(keep_last=0)


# --- truncate tool outputs ----------------------------------------------------------------


async def test_truncate_cuts_every_long_output_with_a_marker() -> None:
    msgs = conversation(3, output_words=300)
    v = view(msgs, limit=1000)
    assert await TruncateToolOutputs(max_tokens=20)(v)
    tools = [m["content"] for m in msgs if m["role"] == "tool"]
    # By default every long result is cut at once (not only until the prompt fits).
    assert tools == [words(20) + "\n[… 280 tokens of tool output cut …]"] * 4
    assert check_pairing(msgs) is None and len(msgs) == 9


async def test_truncate_not_all_cuts_oldest_first_until_it_fits() -> None:
    msgs = conversation(3, output_words=300)
    v = view(msgs, limit=1000)
    before = v.tokens()
    assert await TruncateToolOutputs(max_tokens=20, all=False)(v)
    assert v.tokens() <= 1000 < before
    tools = [m for m in msgs if m["role"] == "tool"]
    assert tools[0]["content"].startswith(words(20) + "\n[… 280 tokens of tool output cut …]")
    # Only until it fits: the newest results are whole.
    assert tools[-1]["content"] == words(300)
    assert check_pairing(msgs) is None and len(msgs) == 9


async def test_truncate_all_and_keep_last() -> None:
    msgs = conversation(3, output_words=300)
    policy = TruncateToolOutputs(max_tokens=10, all=True, keep_last=1)
    assert await policy(view(msgs, limit=10_000))
    tools = [m["content"] for m in msgs if m["role"] == "tool"]
    assert all(policy.was_cut(t) for t in tools[:-1]) and tools[-1] == words(300)
    # Cut results are not cut again.
    assert not await policy(view(msgs, limit=10_000))


async def test_truncate_leaves_short_outputs() -> None:
    msgs = conversation(2, output_words=5)
    assert not await TruncateToolOutputs(max_tokens=10)(view(msgs, limit=1))


def test_truncate_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"TruncateToolOutputs\.max_tokens"):
        TruncateToolOutputs(max_tokens=0)
    with pytest.raises(ConfigError, match=r"TruncateToolOutputs\.marker"):
        TruncateToolOutputs(marker="[cut]")
    with pytest.raises(ConfigError, match=r"TruncateToolOutputs\.keep_last"):
        TruncateToolOutputs(keep_last=-1)
    # Formatted at every cut: a field other than {cut}, or a bad format, fails here.
    for marker in ("[{cut} cut, see {path}]", "[{cut:q}]", "[{cut} of {0}]"):
        with pytest.raises(ConfigError, match=r"TruncateToolOutputs\.marker .* cannot be"):
            TruncateToolOutputs(marker=marker)
    assert TruncateToolOutputs(marker="[{cut:,} cut]").marker == "[{cut:,} cut]"


def test_word_estimator_sanity() -> None:
    est = WordEstimator()
    assert est.message(tool_round("x", 1, 3)[1]) == 7


# --- end to end on the simulator, over real HTTP --------------------------------------------

WINDOW = 1500
RESERVE = 48  # the agents' max_tokens


def budget(policy: Any) -> ContextBudget:
    return ContextBudget(
        window=WINDOW, reserve_output=RESERVE, margin=0.02, pin_first=1, overflow=policy
    )


async def run_one(policy: Any, tool: ReadFile, rounds: int) -> tuple[SessionResult, list[Any]]:
    events: list[Any] = []
    async with simulator() as (_, transport):
        agent = sim_agent(budget(policy), tool, rounds=rounds)
        fleet = Fleet(transport, callbacks=[events.append])
        result = await fleet.run([agent.session("Fix the bug in cache.py", session_id="s-1")])
    return result.sessions[0], events


async def test_fail_on_the_simulator_ends_the_session_with_context_overflow() -> None:
    session, events = await run_one(Fail(), ReadFile([1500], 100), rounds=3)
    assert session.status == "error" and len(session.turns) == 1
    err = session.error
    assert isinstance(err, ContextOverflow)
    assert err.session_id == "s-1" and err.limit == WINDOW and err.tokens > WINDOW
    assert f"{err.tokens:,} tokens" in str(err) and "1,500-token window" in str(err)
    (error_event,) = [e for e in events if e.type == "error"]
    assert error_event.error is err and error_event.where == "session"


async def test_drop_oldest_on_the_simulator_keeps_prompts_inside_the_window() -> None:
    # A first file of 500 words, then small ones: turn 5 overflows and drops the big one.
    session, events = await run_one(DropOldest(), ReadFile([500], 100), rounds=6)
    assert session.status == "completed", session.error
    reported = prompt_tokens(session)
    assert max(reported) <= WINDOW - RESERVE
    # Six rounds, then the answer: the simulator knows the session by its X-Session-ID,
    # so the rounds DropOldest hid are not played again.
    assert sum(reported) > 0 and len(session.turns) == 7
    trimmed = [e for e in events if e.type == "context_trimmed"]
    assert trimmed and {e.policy for e in trimmed} == {"drop_oldest"}
    assert all(e.tokens_after <= e.limit < e.tokens_before for e in trimmed)
    assert session.messages[1]["content"] == "Fix the bug in cache.py"  # pinned
    assert check_pairing(session.messages) is None
    # The prompt really shrank on the wire when the policy ran.
    turn = trimmed[0].turn
    assert reported[turn] < reported[turn - 1]


async def test_truncate_on_the_simulator_keeps_prompts_inside_the_window() -> None:
    policy = TruncateToolOutputs(max_tokens=150)
    session, events = await run_one(policy, ReadFile([], 500), rounds=3)
    assert session.status == "completed", session.error
    assert max(prompt_tokens(session)) <= WINDOW - RESERVE
    trimmed = [e for e in events if e.type == "context_trimmed"]
    assert [e.policy for e in trimmed] == ["truncate_tool_outputs"] * len(trimmed) and trimmed
    cut = [m for m in session.messages if m["role"] == "tool" and policy.was_cut(m["content"])]
    assert cut and "tokens of tool output cut …]" in cut[0]["content"]
    assert len(session.messages) == 2 + 2 * 3 + 1  # nothing dropped: only cut
