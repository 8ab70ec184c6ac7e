"""Tool-schema ``pattern``s: the simulator builds a matching string from the pattern, never
runs the client's regular expression (which could backtrack for hours on its event loop)."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import aiohttp
import pytest

from agentflow.sim.arguments import SchemaError, generate_value
from agentflow.sim.pattern import MAX_PATTERN_STEPS, PatternError, pattern_string
from agentflow.sim.server import SimServer

from ..wait import GUARD_S
from .simhttp import QUICK
from .simproc import sim_child

PATTERNS = [
    r"^\d{5}$",
    r"^(a+)+$",
    r"^([a-z]+)+[0-9]$",
    r"^(\w+\s?)*$",
    r"^[A-Z]{2}-\d{3,4}$",
    r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$",
    r"(?i)^(ab|cd)\1x$",
    r"^\w+\s\W\D\S$",
    r"^(?:foo|bar)*baz?$",
    r"^\d{3}(?:-\d{4})?$",
    r"^v\d+\.\d+\.\d+(-[a-z0-9.]+)?$",
    r"^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$",
    r"(?x) ^ a \  b $",
    r"^[\u00e9-\u00ff]{3}$",
    r"^(?P<x>q)(?P=x)$",
    r"[^a-zA-Z0-9]",
    r"x*?y+?",
    r"a|^b",
    r"^$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(("lo", "hi"), [(0, None), (12, None), (0, 6), (8, 10)])
def test_the_string_made_from_a_pattern_matches_it(pattern: str, lo: int, hi: int | None) -> None:
    for seed in range(20):
        text = pattern_string(pattern, random.Random(seed), lo, hi)
        assert text is not None and re.search(pattern, text), (seed, text)
        assert text == pattern_string(pattern, random.Random(seed), lo, hi)  # deterministic


def test_lengths_are_met_when_the_pattern_allows_them() -> None:
    rng = random.Random(0)
    for _ in range(50):
        assert len(pattern_string(r"^[a-z]+@[a-z]+\.com$", rng, 40) or "") >= 40
        assert 3 <= len(pattern_string(r"^\d+$", rng, 3, 5) or "") <= 5
    # The pattern comes first, as in guided decoding: five digits, whatever minLength says.
    assert re.fullmatch(r"\d{5}", pattern_string(r"^\d{5}$", rng, 20) or "")


@pytest.mark.parametrize(
    "pattern", [r"(?=x)x", r"(?!a)b", r"(?<=a)b", r"\bfoo\b", r"a\B", r"(?>a+)b", r"a++", r"a$b",
                r"(a)?(?(1)b|c)"],
)  # fmt: skip
def test_constructs_it_does_not_generate_leave_the_pattern_ignored(pattern: str) -> None:
    assert pattern_string(pattern, random.Random(0)) is None
    value = generate_value({"type": "string", "pattern": pattern}, random.Random(0))
    assert isinstance(value, str) and value  # words, as for any string


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("(", "is not a regular expression: missing )"),
        ("a{99999999999}", "repeats more than re allows"),
        (
            "((a{1000}){1000}){1000}",
            f"asks for more than the simulator generates ({MAX_PATTERN_STEPS}",
        ),
        ("((?:){1000}){1000}", "asks for more"),
    ],
)
def test_a_pattern_no_string_can_come_from_is_a_schema_error(pattern: str, words: str) -> None:
    with pytest.raises(PatternError, match=re.escape(words)):
        pattern_string(pattern, random.Random(0))
    with pytest.raises(SchemaError, match=re.escape(words)):
        generate_value({"type": "string", "pattern": pattern}, random.Random(0))


def tool_body(prop: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": {"a": prop}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    return {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 200,
            "tool_choice": "required", "tools": [tool]}  # fmt: skip


async def post(base: str, body: Any) -> tuple[int, Any]:
    """(status, JSON body) of one chat request; the timeout is only a hang guard."""
    timeout = aiohttp.ClientTimeout(total=GUARD_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(f"{base}/v1/chat/completions", json=body) as r,
    ):
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


async def test_a_catastrophic_pattern_gets_a_matching_argument_over_http() -> None:
    """`^([a-z]+)+[0-9]$` with minLength 30: the old candidates included 30 lowercase
    letters, on which re.search backtracks through 2**29 ways of splitting them — the
    server's event loop stopped for hours. The simulator runs in a child process here, so
    that the old code fails this test (at the hang guard) instead of hanging it."""
    child, url = sim_child("--quiet")
    try:
        props: list[dict[str, Any]] = [
            {"type": "string", "minLength": 30, "pattern": "^([a-z]+)+[0-9]$"},
            {"type": "string", "minLength": 40, "pattern": "^(a+)+$"},
            {"type": "string", "minLength": 30, "pattern": r"^(\w+\s?)*$"},
        ]
        for prop in props:
            status, answer = await post(url, tool_body(prop))
            assert status == 200, answer
            call = answer["choices"][0]["message"]["tool_calls"][0]
            value = json.loads(call["function"]["arguments"])["a"]
            assert re.fullmatch(prop["pattern"], value) and len(value) >= prop["minLength"]
    finally:
        child.stop()


@pytest.mark.parametrize(
    ("pattern", "words"),
    [("(", "is not a regular expression"), ("((a{1000}){1000}){1000}", "asks for more")],
)
async def test_a_pattern_no_string_can_come_from_is_a_400_naming_tools(
    pattern: str, words: str
) -> None:
    """An invalid pattern was re.error out of the generator: a 500. One whose strings are
    a billion characters long was tried on a few short candidates, then ignored."""
    async with SimServer(QUICK) as sim:
        status, answer = await post(sim.url, tool_body({"type": "string", "pattern": pattern}))
        assert status == 400, answer
        assert answer["error"]["param"] == "tools" and words in answer["error"]["message"]
        assert sim.driver.stats().submitted == 0
