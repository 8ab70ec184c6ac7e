"""The nesting check of ``messages`` and ``tools``: the same refusals as a walk over every
node, with Python work per level of nesting, not per message of the conversation."""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from collections.abc import Mapping
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.sim.api import decode_chat_body, parse_chat_body
from agentflow.sim.errors import RequestRejected
from agentflow.sim.nesting import MAX_NESTING, check_nesting


def depth(value: Any) -> int:
    """Levels of arrays and objects (mappings, lists, tuples), the reference definition."""
    if isinstance(value, Mapping):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max(map(depth, value), default=0)
    return 0


def agrees(value: Any) -> None:
    """The check passes ``value`` if it nests at most 64 levels, else refuses it with the
    400 naming the field."""
    if depth(value) <= MAX_NESTING:
        check_nesting(value, "messages")
        return
    with pytest.raises(RequestRejected, match=r"^messages is nested too deep: at most 64 ") as e:
        check_nesting(value, "messages")
    assert (e.value.param, e.value.status) == ("messages", 400)


def wrap(value: Any, levels: int, kind: int) -> Any:
    for i in range(levels):
        value = [
            [value],
            {"k": value},
            (value,),
            OrderedDict(k=value),
            {"a": 1, "b": [value, "x"]},
        ][(kind + i) % 5]
    return value


@pytest.mark.parametrize("kind", range(5))
@pytest.mark.parametrize("levels", [0, 1, 63, 64, 65, 200])
def test_refused_exactly_past_64_levels(levels: int, kind: int) -> None:
    value = wrap("leaf", levels, kind)
    agrees(value)


def test_64_levels_pass_65_are_refused() -> None:
    for wrap_one in (lambda v: [v], lambda v: {"k": v}, lambda v: (v,)):
        value: Any = 0
        for levels in range(1, 67):
            value = wrap_one(value)
            assert depth(value) == levels
            agrees(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(0, 70), st.integers(0, 4))
def test_the_same_verdict_as_the_reference(value: Any, levels: int, kind: int) -> None:
    agrees(wrap(value, levels, kind))


def conversation(turns: int) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "do it"}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "out\n" * 5})
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    return json.dumps({"messages": messages, "tools": [tool] * 4, "max_tokens": 5}).encode()


def nesting_lines(run: Any) -> int:
    """Lines of Python the nesting check runs while ``run()`` runs (C code runs none)."""
    lines = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        code = frame.f_code
        if code.co_filename.endswith("nesting.py") or "nesting" in code.co_qualname:
            if event == "line":
                lines += 1
            return tracer
        return None

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return lines


def test_the_python_work_does_not_grow_with_the_conversation() -> None:
    """Each request repeats its whole conversation, and the check walked every node of it
    in Python: about five times the cost of decoding the body. Now the Python work is per level of
    nesting; the values of a level are handled by C code."""
    short, long = conversation(2), conversation(400)
    assert nesting_lines(lambda: decode_chat_body(short)) == nesting_lines(
        lambda: decode_chat_body(long)
    )
    body = json.loads(long)
    assert nesting_lines(lambda: parse_chat_body(json.loads(short))) == nesting_lines(
        lambda: parse_chat_body(body)
    )
