"""Hostile or malformed requests to the simulator's HTTP server: each one is answered at
once with a 400 in vLLM's JSON shape naming the field — never a plain-text 500, never a
server that stops answering while it works on one request."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from agentflow.sim.arguments import MAX_ARGUMENT_SIZE, SchemaError, generate_value
from agentflow.sim.server import SimServer

from ..wait import GUARD_S
from .simhttp import QUICK

MSGS = [{"role": "user", "content": "x"}]


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(QUICK) as server:
        yield server


async def post(sim: SimServer, path: str, body: Any = None, raw: bytes | None = None) -> Any:
    """(status, content type, decoded JSON body) of one POST; the timeout is a hang guard."""
    timeout = aiohttp.ClientTimeout(total=GUARD_S)
    data = raw if raw is not None else None
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(f"{sim.url}{path}", json=body if raw is None else None, data=data) as r,
    ):
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


def tool_body(prop: Any, **extra: Any) -> dict[str, Any]:
    """A request that makes the simulated model call tool ``f`` whose one argument is ``prop``."""
    params = {"type": "object", "properties": {"a": prop}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    return {"model": "m", "messages": MSGS, "max_tokens": 5, "tool_choice": "required",
            "tools": [tool], **extra}  # fmt: skip


@pytest.mark.parametrize(
    ("prop", "words"),
    [
        ({"type": "string", "minLength": 100_000}, "minLength 100000"),
        ({"type": "array", "minItems": 100_000, "items": {"type": "integer"}}, "minItems 100000"),
        ({"type": "object", "minProperties": 100_000}, "minProperties 100000"),
        (  # each string is allowed; a thousand of them are not
            {"type": "array", "minItems": 1000, "items": {"type": "string", "minLength": 1000}},
            "minLength 1000",
        ),
    ],
)
async def test_a_schema_that_demands_huge_arguments_is_a_400(
    sim: SimServer, prop: Any, words: str
) -> None:
    """The arguments are planned on the event loop before max_tokens applies: a schema
    asking for millions of characters or items stalled every client for minutes."""
    status, body = await post(sim, "/v1/chat/completions", tool_body(prop))
    assert status == 400, body
    err = body["error"]
    assert err["param"] == "tools" and err["type"] == "BadRequestError"
    assert words in err["message"] and str(MAX_ARGUMENT_SIZE) in err["message"]
    assert sim.driver.stats().submitted == 0


def test_arguments_up_to_the_limit_are_generated() -> None:
    rng = random.Random(0)
    lo = MAX_ARGUMENT_SIZE - 10
    assert len(generate_value({"type": "string", "minLength": lo, "maxLength": lo}, rng)) == lo
    many = generate_value({"type": "array", "minItems": lo, "items": {"type": "integer"}}, rng)
    assert len(many) == lo
    with pytest.raises(SchemaError, match="minLength 65537"):
        generate_value({"type": "string", "minLength": MAX_ARGUMENT_SIZE + 1}, rng)
