"""A tool call whose arguments are not a JSON object (a turn cut by ``max_tokens``
mid-call) goes back into the history as ``"{}"``: vLLM parses every assistant call's
arguments in the history and refuses the request when they are not JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow import Agent, HTTPTransport, tool
from agentflow.sim import RequestRejected
from agentflow.sim.api import parse_chat_body
from agentflow.testing import Reply, ScriptedServer, sse_frames
from tests.toolcall import tool_message


@tool
def search(query: str) -> str:
    """Search."""
    return "hit"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _cut_call(arguments: str, name: str = "search") -> Reply:
    """A turn whose one call's arguments stop at ``arguments`` (``finish_reason: length``)."""
    call = {"index": 0, "id": "call_a", "type": "function"}
    return Reply(
        frames=sse_frames(
            [
                _chunk(
                    {
                        "role": "assistant",
                        "tool_calls": [{**call, "function": {"name": name, "arguments": ""}}],
                    }
                ),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
                _chunk({}, "length"),
            ]
        )
    )


@pytest.mark.parametrize("arguments", ['{"query": "long que', '["a"]', "  "])
async def test_arguments_that_are_no_json_object_go_back_as_an_empty_object(
    arguments: str,
) -> None:
    """The cut call's text went back verbatim: vLLM (and the simulator) answered the next
    request with a 400 and the session ended in error, where the model could have read
    the call's ``Error: ...`` result and tried again."""
    agent = Agent(name="a", model="m", tools=[search])
    script = [_cut_call(arguments), Reply.text("ok"), _cut_call(arguments), Reply.text("ok")]
    async with ScriptedServer(script) as srv, HTTPTransport(srv.base_url) as http:
        result = await agent.run("go", http)
        second = await agent.run("go", http)  # an equal turn
    assert result.status == "completed"
    assert result.turns[0].trace.tool_calls[0].arguments == arguments  # the trace keeps it
    sent = srv.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert tool_message(srv, 1).startswith("Error: ")
    parse_chat_body({"model": "m", "messages": sent})  # the simulator takes it, as vLLM does
    # An equal turn gives an equal message, byte for byte (the prefix cache).
    assert srv.requests[3].body["messages"] == sent
    assert json.dumps(second.turns[0].trace.assistant_message()) == json.dumps(
        result.turns[0].trace.assistant_message()
    )


@tool
def scale(x: float) -> str:
    """Scale."""
    return repr(x)


@pytest.mark.parametrize(("arguments", "ran"), [('{"x": NaN}', "nan"), ('{"x": 1e400}', "inf")])
async def test_arguments_python_json_takes_go_back_as_sent(arguments: str, ran: str) -> None:
    """msgspec refuses NaN, Infinity and 1e400, Python's json (vLLM's) takes them, and so
    does the tool's validation: the call ran with them, but its history said ``"{}"``."""
    agent = Agent(name="a", model="m", tools=[scale])
    async with (
        ScriptedServer([_cut_call(arguments, "scale"), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await agent.run("go", http)
    assert result.status == "completed"
    assert tool_message(srv, 1) == ran
    sent = srv.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == arguments
    parse_chat_body({"model": "m", "messages": sent})


@pytest.mark.parametrize("arguments", ['{"query": "long que', "{'a': 1}"])
def test_the_simulator_refuses_history_arguments_that_are_no_json(arguments: str) -> None:
    """vLLM ``json.loads`` each history call's arguments: text that is no JSON is a 400."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(RequestRejected, match=r"messages\[1\]\.tool_calls\[0\]") as ei:
        parse_chat_body({"model": "m", "messages": messages})
    assert (ei.value.status, ei.value.param) == (400, "messages")


@pytest.mark.parametrize("arguments", ["", None, '{"a": 1}'])
def test_the_simulator_takes_empty_or_json_history_arguments(arguments: str | None) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    parse_chat_body({"model": "m", "messages": messages})


def test_the_simulator_leaves_json_loads_to_what_msgspec_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each history call's arguments were parsed by ``json.loads``, twice as slow as
    msgspec over a long history: it judges only what msgspec refuses (NaN)."""
    loads: list[str] = []
    real = json.loads

    def counting(text: str, **kw: Any) -> Any:
        loads.append(text)
        return real(text, **kw)

    monkeypatch.setattr(json, "loads", counting)
    arguments = [json.dumps({"query": "x" * 100, "n": i}) for i in range(20)] + ['{"x": NaN}']
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": calls}]
    parse_chat_body({"model": "m", "messages": messages})
    assert loads == ['{"x": NaN}']


def test_the_simulator_takes_arguments_with_a_lone_surrogate_as_json_loads_does() -> None:
    """msgspec cannot encode a lone surrogate (a str given in-process): its
    ``UnicodeEncodeError`` escaped ``parse_chat_body`` instead of the text being judged by
    ``json.loads``, which takes it (as vLLM does)."""
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": "\ud800"}'},
    }
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    parse_chat_body({"model": "m", "messages": messages})
