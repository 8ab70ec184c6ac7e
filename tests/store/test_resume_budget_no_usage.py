"""Budgets continue on resume for turns the server sent no usage for: live, a fleet
budget with no ``ContextBudget`` in the chain charges such a turn a rough count of its
prompt (4 characters a token); the resume charges the recorded turn the same count,
rebuilt from the record (it used to charge 0 prompt tokens, so the resumed budget
started below what the run had spent)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet, FleetResult, HTTPTransport, Tool
from agentflow.context import FleetBudget
from agentflow.store import SQLiteStore
from agentflow.testing import Reply, ScriptedServer, sse_frames

ROUNDS = 4


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def _call(i: int) -> Reply:
    """Turn ``i``: one call of ``read``, and no usage chunk."""
    call = {"index": 0, "id": f"call_{i}", "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"path": f"f{i}"})}}  # fmt: skip
    chunks = [_chunk({"role": "assistant", "content": ""}), _chunk({"tool_calls": [call]})]
    return Reply(frames=sse_frames([*chunks, _chunk({}, "tool_calls")]))


def _answer() -> Reply:
    return Reply(frames=sse_frames([_chunk({"role": "assistant", "content": ""}),
                                    _chunk({"content": "done"}), _chunk({}, "stop")]))  # fmt: skip


class _Cut:
    """Cancels the run from inside the tool call of ``at_path``: a cut at a known point
    (the turn that asked for it recorded, its result not), whatever the timing."""

    def __init__(self, at_path: str | None) -> None:
        self.at_path = at_path
        self.run: asyncio.Task[FleetResult] | None = None

    async def read(self, path: str) -> str:
        """Read a file.

        Args:
            path: the file.
        """
        if path == self.at_path and self.run is not None:
            self.run.cancel()
            await asyncio.Event().wait()  # cancelled here
        return f"the content of {path}: " + "some file content here " * 200


def _agent(budget: FleetBudget, cut: _Cut) -> Agent:
    return Agent(
        name="a",
        model="m",
        instructions="You are careful. " * 50,
        tools=[Tool.from_function(cut.read, name="read", in_thread=False)],
        context=budget,
    )


async def _run(
    path: Path, replies: list[Reply], budget: FleetBudget, cut: _Cut, *, resume: bool = False
) -> None:
    """Run ``r`` (or resume it) until it is done or cut."""
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as http:
        store = SQLiteStore(path)
        fleet = Fleet(http, store=store)
        try:
            if resume:
                result = await fleet.resume("r", agents=[_agent(budget, cut)])
                assert [s.status for s in result.sessions] == ["completed"]
                return
            session = _agent(budget, cut).session("task", session_id="s0")
            cut.run = asyncio.ensure_future(fleet.run([session], run_id="r"))
            try:
                await cut.run
            except asyncio.CancelledError:
                assert cut.at_path is not None
        finally:
            await store.aclose()


async def test_a_resumed_budget_charges_usage_less_turns_as_live(tmp_path: Path) -> None:
    replies = [_call(i) for i in range(ROUNDS)] + [_answer()]
    whole = FleetBudget(max_tokens=10_000_000)
    await _run(tmp_path / "whole.db", replies, whole, _Cut(None))
    assert whole.requests == ROUNDS + 1 and whole.tokens > 4_000

    cut = FleetBudget(max_tokens=10_000_000)  # cut in turn 1's tool call: turns 0, 1 recorded
    await _run(tmp_path / "cut.db", replies[:2], cut, _Cut("f1"))
    assert cut.requests == 2
    again = FleetBudget(max_tokens=10_000_000)  # the resuming process's, from zero
    await _run(tmp_path / "cut.db", replies[2:], again, _Cut(None), resume=True)
    assert (again.tokens, again.requests) == (whole.tokens, whole.requests)
