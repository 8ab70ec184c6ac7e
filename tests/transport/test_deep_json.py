"""JSON a server nests deeper than a decoder recurses is a malformed answer, never a bare
``RecursionError``.

msgspec raises ``RecursionError`` (not ``DecodeError``) for arrays nested about 1000
deep — 2.4 KB of ``[[[…]]]`` — and :func:`~agentflow._redact.redact_data`, which every
error body passes through, recursed in Python and failed at a few hundred levels. Each
place that reads a server's JSON is checked here with such a body.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from agentflow import (
    Agent,
    BadRequestError,
    HTTPTransport,
    StreamProtocolError,
    Tool,
    ToolError,
)
from agentflow._redact import MASK, MAX_DATA_DEPTH, redact_data
from agentflow.context import server_window
from agentflow.llamacpp import oversubscription, server_slots
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import AiohttpTransport, TraceBuilder


def deep() -> bytes:
    """Arrays nested past msgspec's limit, which is the interpreter's recursion limit
    (another test may have raised it: 1,200 levels decoded then)."""
    n = sys.getrecursionlimit() + 200
    return b"[" * n + b"]" * n


MID = b"[" * 600 + b"]" * 600  # msgspec decodes it; a recursive walk in Python did not


async def _error_of(reply: Reply, transport: type[HTTPTransport] | type[AiohttpTransport]) -> Any:
    async with ScriptedServer([reply]) as srv, transport(srv.base_url) as t:
        res = await Agent(name="a", model="m", instructions="s").session("hi").run(t)
    assert res.status == "error"
    return res.error


@pytest.mark.parametrize("transport", [HTTPTransport, AiohttpTransport])
async def test_a_too_deep_error_body_is_a_status_error(
    transport: type[HTTPTransport] | type[AiohttpTransport],
) -> None:
    """The body is kept as text, as any body that is not JSON is."""
    err = await _error_of(Reply(frames=[deep()], status=400), transport)
    assert isinstance(err, BadRequestError) and err.status == 400
    assert isinstance(err.body, str) and err.body.startswith("[[[")


@pytest.mark.parametrize("where", [b'{"error": %s}', b'{"timings": {"a": %s}}'])
async def test_a_too_deep_chunk_is_a_protocol_error(where: bytes) -> None:
    frame = b"data: " + where.replace(b"%s", deep()) + b"\n\n"
    err = await _error_of(Reply(frames=[frame]), HTTPTransport)
    assert isinstance(err, StreamProtocolError)
    assert "nested too deep" in str(err)


def test_a_too_deep_chunk_with_a_surrogate_escape_is_a_protocol_error() -> None:
    """The lenient reading of a lone surrogate (after msgspec refused it) has the same
    depth limit, in the standard library's parser."""
    payload = b'{"x": "\\ud800", "timings": {"a": ' + deep() + b"}}"
    with pytest.raises(StreamProtocolError, match="malformed chunk"):
        TraceBuilder(endpoint="http://x/v1", sent_ns=0).feed(payload, 1)


@pytest.mark.parametrize(
    "frame", [MID, b'data: {"error": {"message": "x", "code": 400, "d": %s}}\n\n']
)
async def test_an_error_body_nested_hundreds_deep_is_kept_to_a_depth(frame: bytes) -> None:
    """Decoded fine, but redacting it recursed past Python's limit; now the part below
    :data:`MAX_DATA_DEPTH` levels is masked."""
    status = 400 if frame is MID else 200
    err = await _error_of(Reply(frames=[frame.replace(b"%s", MID)], status=status), HTTPTransport)
    assert isinstance(err, BadRequestError)
    assert MASK in repr(err.body)


def test_redact_data_masks_what_is_nested_beyond_its_depth() -> None:
    deep: Any = "sk-never-seen"
    for _ in range(5000):
        deep = [deep]
    out = redact_data({"a": deep})
    for _ in range(MAX_DATA_DEPTH):
        (out,) = out.values() if isinstance(out, dict) else out
    assert out == MASK
    shallow = {"a": [{"b": ("c", 1)}], "api_key": "k"}
    assert redact_data(shallow) == {"a": [{"b": ("c", 1)}], "api_key": MASK}


async def test_tool_arguments_nested_too_deep_are_a_tool_error() -> None:
    """For a tool with a raw JSON schema, so ``tool_errors="return"`` applies."""
    raw = Tool(
        name="g", description="g", parameters={"type": "object", "properties": {"x": {}}}, fn=dict
    )
    with pytest.raises(ToolError, match="nested too deep"):
        await raw.invoke('{"x": ' + deep().decode() + "}")


async def test_a_raw_tool_given_too_deep_arguments_answers_the_model() -> None:
    ran: list[Any] = []

    def g(**kw: Any) -> str:
        ran.append(kw)
        return "ok"

    raw = Tool(
        name="g", description="g", parameters={"type": "object", "properties": {"x": {}}}, fn=g
    )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {"index": 0, "id": "call_1", "type": "function"}
    call["function"] = {"name": "g", "arguments": '{"x": ' + deep().decode() + "}"}
    frames = sse_frames(
        [chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls")]
    )
    async with ScriptedServer([Reply(frames=frames), Reply.text("done")]) as srv:
        async with HTTPTransport(srv.base_url) as t:
            agent = Agent(name="a", model="m", instructions="s", tools=[raw], tool_errors="return")
            res = await agent.session("hi").run(t)
        answered = srv.requests[1].body["messages"][-1]
    assert res.status == "completed" and ran == []
    assert answered["role"] == "tool" and "nested too deep" in answered["content"]


@asynccontextmanager
async def _deep_server() -> AsyncIterator[str]:
    async def answer(_: web.Request) -> web.Response:
        return web.Response(body=deep(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/props", answer)
    app.router.add_get("/v1/models", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


async def test_probes_read_a_too_deep_answer_as_no_answer() -> None:
    """``server_slots``, ``oversubscription`` and ``server_window`` take JSON they cannot
    read as a server that does not say."""
    async with _deep_server() as url:
        assert await server_slots(url) is None
        assert await oversubscription(url, 8) is None
        assert await server_window(url) is None
