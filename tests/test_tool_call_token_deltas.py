"""Tool-call ``TokenEvent`` deltas do not say which call they belong to: with parallel
calls whose argument deltas arrive interleaved, their concatenation is not valid JSON.
The reference (``TokenEvent``'s docstring and docs/events.md) says they are for display
and that each call is whole on its ``ToolCallEvent`` — it used to say nothing of it."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet, HTTPTransport, TokenEvent
from agentflow.testing import Reply, ScriptedServer, capture_events, sse_frames

DOC = (Path(__file__).parents[1] / "docs" / "events.md").read_text()


def echo(x: str) -> str:
    """Echo.

    Args:
        x: what to echo.
    """
    return x


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "created": 0,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _args(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


# Two parallel calls, both in flight at once: their argument deltas interleave.
PARALLEL = sse_frames(
    [
        _chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {"index": i, "id": f"call_{i}", "type": "function"}
                    | {"function": {"name": "echo", "arguments": ""}}
                    for i in (0, 1)
                ],
            }
        ),
        _chunk({"tool_calls": [_args(0, '{"x": '), _args(1, '{"x": ')]}),
        _chunk({"tool_calls": [_args(1, '"B"}')]}),
        _chunk({"tool_calls": [_args(0, '"A"}')]}),
        _chunk({}, "tool_calls"),
    ]
)


async def test_each_call_is_whole_on_its_tool_call_event_not_in_the_deltas() -> None:
    events = capture_events("token", "tool_call")
    async with (
        ScriptedServer([Reply(frames=PARALLEL), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, callbacks=[events]).run(
            [Agent(name="a", model="m", tools=[echo]).session("go")]
        )
    assert result.sessions[0].status == "completed"
    deltas = "".join(e.text for e in events.of_type("token") if e.kind == "tool_call")
    assert deltas == '{"x": {"x": "B"}"A"}'  # interleaved: not one call's JSON, nor two
    calls = {e.call.id: json.loads(e.call.arguments) for e in events.of_type("tool_call")}
    assert calls == {"call_0": {"x": "A"}, "call_1": {"x": "B"}}


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_reference_says_tool_call_deltas_are_for_display() -> None:
    docstring = _words(inspect.getdoc(TokenEvent) or "")
    assert re.search(r"Tool-call deltas are for display: they do not say which call", docstring)
    assert re.search(r"on its :class:`ToolCallEvent`", docstring)
    doc = _words(DOC)
    assert re.search(r"`tool_call` deltas are for display", doc)
    assert re.search(r"need not be valid JSON", doc)
