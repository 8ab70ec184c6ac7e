"""sim/api.py: request bodies decoded into msgspec Structs; a bad field is a 400 naming it."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from agentflow.sim import RequestRejected
from agentflow.sim.api import (
    ChatBody,
    decode_chat_body,
    decode_tokenize_body,
    parse_chat_body,
)
from agentflow.sim.server import SimServer

from .simhttp import QUICK, TOOLS

MSGS = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"max_tokens": "3"}, "max_tokens", "Expected `int | null`, got `str`"),
        ({"max_completion_tokens": 2.5}, "max_completion_tokens", "got `float`"),
        ({"seed": True}, "seed", "got `bool`"),
        ({"stream": "yes"}, "stream", "got `str`"),
        ({"stop": 3}, "stop", "Expected `str | array | null`"),
        ({"stop": ["a", 1]}, "stop", "`stop[1]`"),
        ({"model": 7}, "model", "got `int`"),
        ({"n": "1"}, "n", "got `str`"),
        ({"tools": {"a": 1}}, "tools", "got `object`"),
        ({"tool_choice": 3}, "tool_choice", "got `int`"),
        ({"stream_options": []}, "stream_options", "got `array`"),
        (  # bool("false") is True: it was read as a request for usage
            {"stream": True, "stream_options": {"include_usage": "false"}},
            "stream_options",
            "`stream_options.include_usage`: Expected `bool | null`, got `str`",
        ),
        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options", "got `int`"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls", "got `str`"),
        ({"agentflow_tool_rounds": "2"}, "agentflow_tool_rounds", "got `str`"),
        ({"messages": "hi"}, "messages", "got `str`"),
        ({"messages": [1]}, "messages", "`messages[0]`"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_400_naming_it(
    extra: dict[str, Any], param: str, words: str
) -> None:
    body = {"messages": MSGS, **extra}
    for parse in (parse_chat_body, lambda b: decode_chat_body(json.dumps(b).encode())):
        with pytest.raises(RequestRejected) as ei:
            parse(body)
        err = ei.value
        assert (err.status, err.param) == (400, param)
        assert f"`{param}" in err.message and words in err.message
        assert err.body()["error"]["param"] == param


def test_missing_messages_and_non_objects() -> None:
    with pytest.raises(RequestRejected) as ei:
        decode_chat_body(b'{"model": "m"}')
    assert ei.value.param == "messages" and "messages is required" in ei.value.message
    for raw in (b"[1, 2]", b'"text"'):
        with pytest.raises(RequestRejected, match="must be a JSON object") as ei:
            decode_chat_body(raw)
        assert ei.value.param is None
    with pytest.raises(RequestRejected, match="Invalid JSON body") as ei:
        decode_chat_body(b"{not json")
    assert ei.value.status == 400
    with pytest.raises(RequestRejected, match="must be a JSON object"):
        parse_chat_body([MSGS])


def test_unknown_fields_are_ignored_and_the_result_is_checked_params() -> None:
    raw = json.dumps(
        {
            "messages": MSGS,
            "temperature": 0.3,
            "logprobs": True,
            "max_tokens": 5,
            "max_completion_tokens": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "read_file"}},
            "agentflow_tool_rounds": 2,
        }
    ).encode()
    p = decode_chat_body(raw)
    assert (p.max_tokens, p.stream, p.include_usage, p.tool_rounds) == (7, True, True, 2)
    assert p.messages == MSGS and p.tools == TOOLS
    for options, usage in (
        ({}, False),
        ({"include_usage": None}, False),
        ({"include_usage": False, "continuous_usage_stats": True}, False),
    ):
        body = {"messages": MSGS, "stream": True, "stream_options": options}
        assert decode_chat_body(json.dumps(body).encode()).include_usage is usage
        assert parse_chat_body(body).include_usage is usage
    # A body already decoded to the Struct is checked the same way.
    assert parse_chat_body(ChatBody(messages=list(MSGS), n=1)).messages == MSGS
    with pytest.raises(RequestRejected) as ei:
        parse_chat_body(ChatBody(messages=list(MSGS), n=2))
    assert ei.value.param == "n"


def test_tokenize_body() -> None:
    body = decode_tokenize_body(b'{"prompt": "hello", "return_token_strs": true}')
    assert body.prompt == "hello" and body.return_token_strs and body.messages is None
    with pytest.raises(RequestRejected) as ei:
        decode_tokenize_body(b'{"prompt": 3}')
    assert ei.value.param == "prompt" and "got `int`" in ei.value.message
    with pytest.raises(RequestRejected) as ei:
        decode_tokenize_body(b'{"messages": [{"content": "no role"}]}')
    assert ei.value.param == "messages"
    with pytest.raises(RequestRejected, match="Either `prompt`"):
        decode_tokenize_body(b"{}")


async def test_the_server_answers_the_bad_field_in_vllms_shape() -> None:
    async with SimServer(QUICK) as sim, aiohttp.ClientSession() as s:
        body = {"model": "m", "messages": MSGS, "max_tokens": "many"}
        async with s.post(f"{sim.base_url}/chat/completions", json=body) as r:
            assert r.status == 400
            err = (await r.json())["error"]
        assert err["param"] == "max_tokens" and err["type"] == "BadRequestError"
        assert "`max_tokens`" in err["message"] and err["code"] == 400
        async with s.post(f"{sim.url}/tokenize", json={"prompt": ["a"]}) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "prompt"
        assert sim.driver.stats().submitted == 0


TOOL_F = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _schema(params: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": params}}


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages", "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages", "messages[0].content"),
        (
            {"messages": [*MSGS, {"role": "assistant", "tool_calls": "x"}]},
            "messages",
            "messages[1].tool_calls",
        ),
        (
            {"messages": [*MSGS, {"role": "assistant", "tool_calls": [1]}]},
            "messages",
            "messages[1].tool_calls",
        ),
        ({"tools": [_schema("x")]}, "tools", "tools[0].function.parameters"),
        # vLLM requires function.name; the model "called" a tool '' (or '5' for name: 5).
        (
            {"tools": [TOOL_F, {"type": "function", "function": {}}]},
            "tools",
            "tools[1].function.name must be a non-empty string, got None",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": 5}}]},
            "tools",
            "tools[0].function.name must be a non-empty string, got 5",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": ""}}]},
            "tools",
            "tools[0].function.name must be a non-empty string, got ''",
        ),
    ],
)
def test_a_malformed_message_or_schema_is_a_400_naming_it(
    extra: dict[str, Any], param: str, words: str
) -> None:
    """Well-typed JSON the engine cannot use: a 400 naming the field, as vLLM gives —
    the simulator answered several with a bare 500."""
    with pytest.raises(RequestRejected) as ei:
        parse_chat_body({"messages": MSGS, **extra})
    assert (ei.value.status, ei.value.param) == (400, param)
    assert words in ei.value.message
    if "messages" in extra:
        with pytest.raises(RequestRejected, match=words.replace("[", r"\[").replace("]", r"\]")):
            decode_tokenize_body(json.dumps({"messages": extra["messages"]}).encode())


async def test_a_schema_no_arguments_satisfy_is_a_400() -> None:
    """An empty enum, a $ref that loops, a minLength that is no number: the request's
    fault (a 400 naming tools) when the simulated model calls the tool, not a 500."""
    bad = [
        {"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": "x"}},
         "required": ["a"]},
    ]  # fmt: skip
    async with SimServer(QUICK) as sim, aiohttp.ClientSession() as s:
        for schema in bad:
            body = {"model": "m", "messages": MSGS, "tools": [_schema(schema)],
                    "tool_choice": "required", "max_tokens": 50}  # fmt: skip
            async with s.post(f"{sim.base_url}/chat/completions", json=body) as r:
                assert r.status == 400, await r.text()
                err = (await r.json())["error"]
            assert err["param"] == "tools" and "admits no arguments" in err["message"]
        body = {"model": "m", "messages": MSGS, "tools": [TOOL_F], "max_tokens": 20}
        async with s.post(f"{sim.base_url}/chat/completions", json=body) as r:
            assert r.status == 200  # and the server goes on serving
