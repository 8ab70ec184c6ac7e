"""Tool calls a server streams without an ``id``: the decoder names each one uniquely
(``call_<random>_<index>``), so a conversation never holds two calls with one id. It
used to name them ``call_0``, ``call_1``, … in every turn, and the store — which knows a
tool result by (run, session, call id) — refused every result from turn 1 on as a
conflict; the finished run could then be neither exported nor resumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentflow import Fleet
from agentflow.store import SQLiteStore, export_report, load_result
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import HTTPTransport
from agentflow.transport._decode import TraceBuilder

from .fleets import agents

TURNS = 3


def _chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-same", "object": "chat.completion.chunk", "model": "m",
            "choices": choices}  # fmt: skip


def _calls_without_ids(n: int) -> Reply:
    """``n`` parallel tool calls, none with an ``id`` (the key is absent)."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    for i in range(n):
        args = json.dumps({"key": f"k{i}"})
        call = {"index": i, "type": "function", "function": {"name": "lookup", "arguments": args}}
        chunks.append(_chunk({"tool_calls": [call]}))
    chunks.append(_chunk({}, "tool_calls"))
    usage = {"prompt_tokens": 20, "completion_tokens": n + 1, "total_tokens": n + 21}
    chunks.append({**_chunk(None), "usage": usage})
    return Reply(frames=sse_frames(chunks))


def test_fallback_ids_are_unique_and_stable_per_stream() -> None:
    """Two streams with the same id-less calls get different ids; one stream's trace,
    finished twice (an error path finishes it early), names its calls alike."""
    frames = [f[len(b"data: ") :].strip() for f in _calls_without_ids(2).frames]
    traces = []
    for _ in range(2):
        builder = TraceBuilder(endpoint="http://x/v1", sent_ns=0)
        for t, payload in enumerate(frames):
            builder.feed(payload, t)
        first = builder.finish(10)
        assert builder.finish(10).tool_calls == first.tool_calls
        traces.append(first)
    ids = [c.id for t in traces for c in t.tool_calls]
    assert len(set(ids)) == 4
    assert all(i.startswith("call_") and i.endswith(f"_{n % 2}") for n, i in enumerate(ids))


async def test_a_run_with_id_less_tool_calls_is_stored_whole(tmp_path: Path) -> None:
    """Over real loopback HTTP, a session of three turns of two id-less calls each, then
    an answer: the store keeps every result (no conflicts), and the run reads back and
    exports with all six results."""
    path = tmp_path / "runs.db"
    replies = [_calls_without_ids(2) for _ in range(TURNS)] + [Reply.text("done")]
    async with ScriptedServer(replies) as server:
        store = SQLiteStore(path)
        try:
            async with HTTPTransport(server.base_url) as transport:
                fleet = Fleet(transport, store=store)
                live = await fleet.run([agents(1)[0].session("task", session_id="s0")], run_id="r")
            assert live.sessions[0].ok, live.sessions[0].error
            assert await store.conflicts("r") == []
        finally:
            await store.aclose()
    server.assert_complete()
    async with SQLiteStore(path) as reader:
        back = await load_result(reader, "r")
        report = await export_report(reader, "r")
    results = [m for m in back.sessions[0].messages if m["role"] == "tool"]
    assert len(results) == 2 * TURNS == len({m["tool_call_id"] for m in results})
    assert back.sessions[0].messages == live.sessions[0].messages
    assert report["fleet"]["tool_calls"] == 2 * TURNS
