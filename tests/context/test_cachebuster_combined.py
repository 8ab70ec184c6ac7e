"""A segment that changed in more than one volatile way is still a cache buster: each cause
is reported — a timestamp and a key order in one JSON object, two reordered objects and
a timestamp in one message, a reordered tool list with a timestamp in a description —
across sessions and turn to turn; and the simulator shows what such a bust costs."""

from __future__ import annotations

import json
from typing import Any

from agentflow.context import CacheBusterCheck, CacheBusterWarning
from agentflow.sim import Engine


def system(content: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": content}, {"role": "user", "content": "go"}]


def bust(a: str, b: str, tools_a: Any = (), tools_b: Any = ()) -> list[CacheBusterWarning]:
    check = CacheBusterCheck()
    assert check.check("s1", "agent", system(a), list(tools_a)) == []
    out = check.check("s2", "agent", system(b), list(tools_b))
    assert check.busts == (1 if out else 0)
    return out


def test_a_timestamp_and_a_key_order_in_one_object_are_both_reported() -> None:
    ref: dict[str, Any] = {"a": 1, "b": 2, "ts": "2026-12-01T10:00:00"}
    cur: dict[str, Any] = {"b": 2, "a": 1, "ts": "2026-12-01T10:00:05"}
    head = "You are an agent. State: "
    warnings = bust(head + json.dumps(ref), head + json.dumps(cur))
    by_kind = {w.kind: w for w in warnings}
    assert set(by_kind) == {"reordered_keys", "timestamp"}
    keys = by_kind["reordered_keys"]
    assert (keys.snippet, keys.reference_snippet) == (json.dumps(cur), json.dumps(ref))
    assert keys.start == len(head)
    stamp = by_kind["timestamp"]
    assert (stamp.snippet, stamp.reference_snippet) == (cur["ts"], ref["ts"])
    assert stamp.start == len(head) + json.dumps(cur).index(cur["ts"])


def test_several_objects_and_a_timestamp_in_one_message() -> None:
    [w] = bust(
        'A: {"x": 1, "y": 2}. B: {"p": 1, "q": 2}.', 'A: {"y": 2, "x": 1}. B: {"q": 2, "p": 1}.'
    )
    assert (w.kind, w.snippet) == ("reordered_keys", '{"y": 2, "x": 1}')
    kinds = [
        w.kind
        for w in bust(
            'Date: 2026-12-01T10:00:00. Config: {"a": 1, "b": 2}',
            'Date: 2026-12-01T10:00:09. Config: {"b": 2, "a": 1}',
        )
    ]
    assert kinds == ["timestamp", "reordered_keys"]


def tool(name: str, description: str) -> dict[str, Any]:
    function = {"name": name, "description": description, "parameters": {"type": "object"}}
    return {"type": "function", "function": function}


def test_a_reordered_tool_list_with_a_timestamp_in_a_description() -> None:
    warnings = bust(
        "S.",
        "S.",
        [tool("a", "A at 2026-12-01T10:00:00"), tool("b", "B")],
        [tool("b", "B"), tool("a", "A at 2026-12-01T10:00:05")],
    )
    by_kind = {w.kind: w for w in warnings}
    assert set(by_kind) == {"reordered_tools", "timestamp"}
    assert (by_kind["timestamp"].snippet, by_kind["timestamp"].reference_snippet) == (
        "2026-12-01T10:00:05",
        "2026-12-01T10:00:00",
    )
    assert all(w.segment == "tools" for w in warnings)


def test_a_real_change_next_to_a_reordered_object_is_not_a_bust() -> None:
    assert bust('Be brief. {"a": 1, "b": 2}', 'Be verbose. {"b": 2, "a": 1}') == []
    assert bust('Cfg {"a": 1, "b": "x"}', 'Cfg {"b": "y", "a": 1}') == []


def test_turn_to_turn_and_what_the_bust_costs_on_the_simulator() -> None:
    """A pinned system prompt re-rendered with a new timestamp and another key order: the
    server's prefix cache loses every hit, and the check reports the bust."""
    guide = "You answer questions about the repository. " * 60
    states = [
        {"ts": "2026-12-01T10:00:00", "a": 1, "b": 2},
        {"a": 1, "ts": "2026-12-01T10:00:05", "b": 2},
    ]

    def messages(state: dict[str, Any], task: str) -> list[dict[str, Any]]:
        content = "State: " + json.dumps(state) + "\n" + guide
        return [{"role": "system", "content": content}, {"role": "user", "content": task}]

    engine, check = Engine("cpu-tiny", seed=1), CacheBusterCheck()
    for sid, state in zip(("s1", "s2"), states, strict=True):
        check.check(sid, "agent", messages(state, f"question of {sid}"), [])
        rid = engine.add_chat(messages(state, f"question of {sid}"), max_tokens=4)
        engine.run_until_idle()
    record = engine.record(rid)
    assert record.cached_tokens == 0 < record.prompt_tokens
    assert check.busts == 1

    turns = CacheBusterCheck()
    history: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for turn, state in enumerate(states):
        pinned = {"role": "system", "content": "State " + json.dumps(state)}
        warnings = turns.check("s1", "agent", [pinned, *history], [], turn=turn)
        history.append({"role": "assistant", "content": f"reply {turn}"})
    assert {(w.kind, w.scope) for w in warnings} == {
        ("reordered_keys", "turns"),
        ("timestamp", "turns"),
    }
