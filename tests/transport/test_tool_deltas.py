"""Tool calls streamed in the shapes servers other than OpenAI's send: several calls under
one index (Ollama), no index (Gemini's OpenAI-compatible endpoint), the name repeated on
every delta, an id that changes after the first delta. Each used to be merged into one
call — ``read_fileread_file`` with both calls' arguments joined — that no tool answers to.
"""

from __future__ import annotations

import json
from typing import Any

from agentflow import Agent, HTTPTransport
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import TraceBuilder


def chunk(calls: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    delta = {"tool_calls": calls} if calls else {}
    return {
        "id": "x",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def call(
    cid: str | None = None, name: str | None = None, args: str | None = None, index: int | None = 0
) -> dict[str, Any]:
    c: dict[str, Any] = {"type": "function", "function": {}}
    if index is not None:
        c["index"] = index
    if cid is not None:
        c["id"] = cid
    if name is not None:
        c["function"]["name"] = name
    if args is not None:
        c["function"]["arguments"] = args
    return c


def calls_of(*chunks: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    b = TraceBuilder(endpoint="http://x/v1", sent_ns=0)
    for i, c in enumerate(chunks):
        b.feed(json.dumps(c).encode(), 10 + i)
    return [(c.index, c.id, c.name, c.arguments) for c in b.finish(100).tool_calls]


A, B = json.dumps({"path": "a.txt"}), json.dumps({"path": "b.txt"})


def test_two_calls_under_one_index_are_two_calls() -> None:
    """Ollama labels every call of a turn ``index: 0``, each whole in its own delta."""
    assert calls_of(
        chunk([call("call_a", "read_file", A)]),
        chunk([call("call_b", "read_file", B)]),
        chunk([], "tool_calls"),
    ) == [(0, "call_a", "read_file", A), (1, "call_b", "read_file", B)]


def test_two_calls_under_one_index_in_one_chunk() -> None:
    assert calls_of(chunk([call("call_a", "read_file", A), call("call_b", "grep", B)])) == [
        (0, "call_a", "read_file", A),
        (1, "call_b", "grep", B),
    ]


def test_calls_without_an_index_are_keyed_by_their_place_in_the_chunk() -> None:
    """Gemini's OpenAI-compatible endpoint sends no index: both calls in one chunk."""
    assert calls_of(
        chunk([call("call_a", "read_file", A, index=None), call("call_b", "read_file", B, None)])
    ) == [(0, "call_a", "read_file", A), (1, "call_b", "read_file", B)]


def test_calls_without_an_index_one_chunk_each() -> None:
    assert calls_of(
        chunk([call("call_a", "read_file", A, index=None)]),
        chunk([call("call_b", "read_file", B, index=None)]),
    ) == [(0, "call_a", "read_file", A), (1, "call_b", "read_file", B)]


def test_a_call_without_an_index_streamed_in_pieces() -> None:
    assert calls_of(
        chunk([call("c1", "read_file", "", index=None)]),
        chunk([call(args='{"path": ', index=None)]),
        chunk([call(args='"a.txt"}', index=None)]),
    ) == [(0, "c1", "read_file", A)]


def test_a_name_and_id_repeated_on_every_delta_are_taken_once() -> None:
    assert calls_of(
        chunk([call("c1", "read_file", '{"path": ')]),
        chunk([call("c1", "read_file", '"a.txt"}')]),
    ) == [(0, "c1", "read_file", A)]


def test_a_name_repeated_on_every_argument_delta_without_the_id() -> None:
    assert calls_of(
        chunk([call("c1", "read_file", "")]),
        chunk([call(name="read_file", args='{"path": ')]),
        chunk([call(name="read_file", args='"a.txt"}')]),
    ) == [(0, "c1", "read_file", A)]


def test_a_name_split_over_deltas_is_joined() -> None:
    """A piece of name alone, before any argument, continues the name — even one equal
    to the piece before it (``get`` + ``get``)."""
    assert calls_of(
        chunk([call("c1", "read_")]), chunk([call(name="file")]), chunk([call(args=A)])
    ) == [(0, "c1", "read_file", A)]
    assert calls_of(
        chunk([call("c1", "get")]), chunk([call(name="get")]), chunk([call(args="{}")])
    ) == [(0, "c1", "getget", "{}")]


def test_an_id_that_changes_after_the_first_delta_is_one_call() -> None:
    """Poolside sends one id with the name and another on the argument deltas."""
    assert calls_of(
        chunk([call("first", "read_file", "")]),
        chunk([call("second", args='{"path": ')]),
        chunk([call("second", args='"a.txt"}')]),
    ) == [(0, "first", "read_file", A)]


def test_a_repeated_name_is_not_counted_as_output_again() -> None:
    b = TraceBuilder(endpoint="http://x/v1", sent_ns=0)
    b.feed(json.dumps(chunk([call("c1", "f", "{")])).encode(), 1)
    b.feed(json.dumps(chunk([call("c1", "f", "}")])).encode(), 2)
    assert b.finish(3).chunk_chars == (2, 1)


ran: list[str] = []


def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    ran.append(path)
    return f"contents of {path}"


async def test_two_calls_under_one_index_run_two_tools_over_http() -> None:
    ran.clear()
    frames = sse_frames(
        [
            chunk([call("call_a", "read_file", A)]),
            chunk([call("call_b", "read_file", B)]),
            chunk([], "tool_calls"),
        ]
    )
    agent = Agent(name="a", model="m", tools=[read_file])
    async with (
        ScriptedServer([Reply(frames=frames), Reply.text("done")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await agent.run("read a and b", http)
        srv.assert_complete()
    assert result.ok, result.error
    assert ran == ["a.txt", "b.txt"]
    sent = srv.requests[1].body["messages"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["call_a", "call_b"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[-2:]] == [
        ("call_a", "contents of a.txt"),
        ("call_b", "contents of b.txt"),
    ]
