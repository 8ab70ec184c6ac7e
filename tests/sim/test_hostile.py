"""Hostile or malformed requests to the simulator's HTTP server: each one is answered at
once with a 400 in vLLM's JSON shape naming the field — never a plain-text 500, never a
server that stops answering while it works on one request."""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from agentflow.sim.api import MAX_NESTING, parse_request_id
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


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "object", "properties": ["a"], "required": ["a"]}, "properties must be"),
        ({"type": "object", "properties": "xy", "required": ["a"]}, "properties must be"),
        ({"type": "object", "properties": {"a": {"allOf": [{"$ref": 5}]}}, "required": ["a"]},
         "$ref must be a string"),
    ],
)  # fmt: skip
async def test_a_malformed_schema_is_a_400_naming_tools(
    sim: SimServer, schema: Any, words: str
) -> None:
    """docs/simulator.md promises a 400 naming the field; these were aiohttp's plain-text
    500 (an AttributeError or OverflowError out of the argument generator)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    body = {"messages": MSGS, "max_tokens": 5, "tool_choice": "required", "tools": [tool]}
    status, answer = await post(sim, "/v1/chat/completions", body)
    assert status == 400, answer
    assert answer["error"]["param"] == "tools" and words in answer["error"]["message"]


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "integer", "minimum": math.inf}, "must be finite"),
        ({"type": "integer", "maximum": -math.inf}, "must be finite"),
        ({"type": "string", "minLength": math.inf}, "minLength must be"),
        ({"type": "array", "maxItems": math.inf}, "maxItems must be"),
    ],
)
def test_an_infinite_bound_is_a_schema_error(schema: Any, words: str) -> None:
    """Over HTTP msgspec refuses 1e400; in process (SimTransport) a float inf reaches the
    generator, whose int(inf) was an OverflowError that escaped as a 500."""
    with pytest.raises(SchemaError, match=words):
        generate_value(schema, random.Random(0))


async def test_an_unexpected_error_is_a_json_500(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever escapes a handler is still answered in vLLM's shape (and logged), not as
    aiohttp's plain-text 500."""

    def broken(*args: Any, **kwargs: Any) -> list[int]:
        raise AttributeError("a bug")

    monkeypatch.setattr(sim.engine.tokenizer, "render_chat", broken)
    status, answer = await post(sim, "/tokenize", {"messages": MSGS})
    assert status == 500
    assert answer["error"] == {
        "message": "Internal server error: AttributeError: a bug",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    assert "POST /tokenize failed" in caplog.text
    status, _ = await post(sim, "/tokenize", {"prompt": "x"})
    assert status == 200  # and the server goes on serving


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def chat_raw(field: bytes, value: bytes) -> bytes:
    return (
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, '
        + field
        + value
        + b"}"
    )


def tool_raw(value: bytes) -> bytes:
    """A tool whose schema holds ``value``."""
    return (b'[{"type": "function", "function": {"name": "f", "parameters": '
            b'{"type": "object", "x": ' + value + b"}}}]")  # fmt: skip


@pytest.mark.parametrize(
    ("path", "raw", "param"),
    [
        # Too deep for msgspec: a RecursionError, not a DecodeError.
        ("/v1/chat/completions", chat_raw(b'"metadata": ', nested(100_000)), None),
        ("/tokenize", b'{"prompt": "x", "extra": ' + nested(100_000) + b"}", None),
        # msgspec reads these; the chat template's json.dumps (or repr) fails at ~990 levels.
        ("/v1/chat/completions", chat_raw(b'"tools": ', tool_raw(nested(500))), "tools"),
        ("/v1/chat/completions", chat_raw(b'"tools": ', tool_raw(nested(70))), "tools"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": ' + nested(500) + b"}]}",
            "messages",
        ),
        ("/tokenize", b'{"prompt": "x", "tools": ' + tool_raw(nested(500)) + b"}", "tools"),
        ("/tokenize", b'{"messages": [{"role": "user", "content": [' + nested(500) + b"]}]}",
         "messages"),
    ],
)  # fmt: skip
async def test_json_nested_too_deep_is_a_400(
    sim: SimServer, path: str, raw: bytes, param: str | None
) -> None:
    status, answer = await post(sim, path, raw=raw)
    assert status == 400, answer
    err = answer["error"]
    assert err["param"] == param and err["type"] == "BadRequestError"
    assert "nested too deep" in err["message"]
    assert sim.driver.stats().submitted == 0


async def test_nesting_up_to_the_limit_is_served(sim: SimServer) -> None:
    schema = nested(MAX_NESTING - 5)  # tools, the tool, function, parameters: 4 levels
    status, answer = await post(
        sim, "/v1/chat/completions", raw=chat_raw(b'"tools": ', tool_raw(schema))
    )
    assert status == 200, answer


@pytest.mark.parametrize(
    "rid", ["chatcmpl-%C2%B2", "%E2%91%A0", "chatcmpl-x", "9" * 5000, "1" * 19, "chatcmpl-"]
)
async def test_a_request_id_that_is_no_number_is_a_404(sim: SimServer, rid: str) -> None:
    """'²' and '①' pass str.isdigit() but not int(), nor do 5,000 digits: a 500."""
    timeout = aiohttp.ClientTimeout(total=GUARD_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.get(f"{sim.url}/agentflow/requests/{rid}") as r,
    ):
        assert (r.status, r.content_type) == (404, "application/json"), await r.text()
        assert (await r.json())["error"]["param"] == "id"
    assert parse_request_id("chatcmpl-42") == 42 == parse_request_id("42")
