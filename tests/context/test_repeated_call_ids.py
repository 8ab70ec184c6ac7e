"""Tool-call ids repeated within one turn (some servers' tool parsers give two calls of a
turn the same id): the history is valid, and an overflow policy that keeps it whole is
not blamed for breaking its pairing; nor is one that finds the pairing already broken."""

from __future__ import annotations

import json
from typing import Any

from agentflow import Agent, HTTPTransport, Tool
from agentflow.context import ContextBudget, DropOldest, check_pairing
from agentflow.testing import Reply, ScriptedServer, sse_frames

from .budget_util import call, words


def _same_id_round(output_words: int) -> list[dict[str, Any]]:
    """An assistant message with two calls both named ``call_0``, then both results."""
    return [
        {"role": "assistant", "content": None, "tool_calls": [call("call_0"), call("call_0")]},
        {"role": "tool", "tool_call_id": "call_0", "content": words(output_words)},
        {"role": "tool", "tool_call_id": "call_0", "content": words(output_words)},
    ]


def test_two_results_answer_two_calls_of_one_id() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    msgs += _same_id_round(5) + _same_id_round(5)
    assert check_pairing(msgs) is None
    # Counted, not collected: a third result for the id has no call left to answer.
    extra = {"role": "tool", "tool_call_id": "call_0", "content": "x"}
    assert "no call before it made" in (check_pairing([*msgs[:4], extra, *msgs[4:]]) or "")
    # And a call of the pair left without its result is still found.
    assert "follows before their results" in (check_pairing(msgs[:3] + msgs[4:]) or "")


async def _before_turn(messages: list[dict[str, Any]], keep_last: int = 1) -> None:
    drop = DropOldest(keep_last=keep_last)
    budget = ContextBudget(window=2000, reserve_output=100, margin=0, overflow=[drop])
    session = budget.bind(session_id="s", agent="a", emit=lambda e: None, model="m")

    async def complete(request: Any) -> Any:
        raise AssertionError("DropOldest makes no request")

    await session.before_turn(3, messages, [], complete)


async def test_drop_oldest_over_repeated_ids_is_not_blamed() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for _ in range(6):
        msgs += _same_id_round(300)
    before = len(msgs)
    await _before_turn(msgs)  # it used to raise "broke tool-call pairing"
    assert len(msgs) < before and check_pairing(msgs) is None
    # Whole rounds went (the prefix is the system message alone: pin_first=0).
    assert msgs[1]["role"] == "assistant" and len(msgs) % 3 == 1


async def test_a_policy_is_not_blamed_for_a_history_given_unpaired() -> None:
    """The task handed the session a turn with a result missing: the policy did not
    break that, and the server, not the budget, judges what the session was given."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for _ in range(6):
        msgs += _same_id_round(300)
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [call("x"), call("y")]},
        {"role": "tool", "tool_call_id": "x", "content": "only x's result was kept"},
        {"role": "user", "content": "go on"},
    ]
    given = check_pairing(msgs[1:])
    assert given is not None and "follows before their results" in given
    before = len(msgs)
    # The newest two units (the turn given broken, and the user's message) are kept.
    await _before_turn(msgs, keep_last=2)  # it used to raise "'drop_oldest' broke …"
    assert len(msgs) < before  # it dropped the oldest rounds, and kept the one given so
    assert msgs[-3]["tool_calls"] == [call("x"), call("y")] and check_pairing(msgs[1:])


def _two_calls_one_id(prompt_tokens: int) -> Reply:
    def chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
              usage: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        c: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "model": "scripted",
                             "choices": []}  # fmt: skip
        if delta is not None or finish is not None:
            c["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
        if usage is not None:
            c["usage"] = usage
        return c

    calls = [
        {"index": i, "id": "call_0", "type": "function",
         "function": {"name": "read", "arguments": json.dumps({"path": f"f{i}"})}}
        for i in range(2)
    ]  # fmt: skip
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 2,
             "total_tokens": prompt_tokens + 2}  # fmt: skip
    return Reply(frames=sse_frames([
        chunk({"role": "assistant", "content": ""}), chunk({"tool_calls": calls}),
        chunk({}, "tool_calls"), chunk(usage=usage),
    ]))  # fmt: skip


def read(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return "lorem ipsum dolor " * 100


async def test_a_session_whose_server_repeats_ids_runs_through_its_overflows() -> None:
    """Over loopback HTTP, a server naming both calls of each turn ``call_0``: the
    session trims its history when it overflows and finishes (it used to end in an
    AgentflowError at the first overflow)."""
    replies = [_two_calls_one_id(60 + 640 * i) for i in range(8)] + [Reply.text("done")]
    agent = Agent(
        name="a",
        model="scripted",
        instructions="sys",
        tools=[Tool.from_function(read, in_thread=False)],
        params={"max_tokens": 100},
        context=ContextBudget(window=4000, margin=0, overflow=[DropOldest()]),
    )
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as http:
        result = await agent.run("task", http)
    assert result.status == "completed", result.error
    assert len(result.turns) == 9 and len(srv.requests) == 9
    # The history was trimmed, and every request kept the calls with their results.
    sent = [r.body["messages"] for r in srv.requests]
    assert len(sent[-1]) < len(sent[5])
    assert all(check_pairing(m[1:]) is None for m in sent)
