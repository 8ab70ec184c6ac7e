"""A run store keeps one configuration per agent name in a run: a run whose sessions
hold two different agents under one name is refused when it starts, before anything is
recorded. (It used to be recorded with the first configuration only: the other agent's
sessions read back — ``load_result``, ``agentflow report --store`` — and resumed with the
first agent's system prompt, silently. A run so recorded now resumes each session with
its own agent's.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Event, Fleet, tool
from agentflow.store import SQLiteStore, Store, _durable
from agentflow.testing import MockTransport, Reply

from ..wait import GUARD_S

A = Agent(name="a", model="m", instructions="You are A")
B = Agent(name="a", model="m", instructions="You are B")


def _transport() -> MockTransport:
    return MockTransport(lambda req: Reply.text("done"))


async def test_run_refuses_two_configurations_under_one_name(
    make_store: Callable[[], Store],
) -> None:
    store = make_store()
    try:
        with pytest.raises(ConfigError, match=r"'a'.*its own name"):
            await Fleet(_transport(), store=store).run(
                [A.session("x", session_id="sA"), B.session("y", session_id="sB")], run_id="r1"
            )
        await store.open()
        assert await store.runs() == []  # nothing recorded
    finally:
        await store.aclose()


async def test_stream_refuses_two_configurations_under_one_name(
    make_store: Callable[[], Store],
) -> None:
    store = make_store()
    try:
        with pytest.raises(ConfigError, match="'a'"):
            async for _ in Fleet(_transport(), store=store).stream(
                [A.session("x", session_id="sA"), B.session("y", session_id="sB")]
            ):
                pass
        await store.open()
        assert await store.runs() == []
    finally:
        await store.aclose()


async def test_two_agent_objects_of_one_configuration_share_a_name(
    make_store: Callable[[], Store],
) -> None:
    twin = Agent(name="a", model="m", instructions="You are A")
    store = make_store()
    try:
        result = await Fleet(_transport(), store=store).run(
            [A.session("x", session_id="s1"), twin.session("y", session_id="s2")], run_id="r1"
        )
        assert [s.status for s in result.sessions] == ["completed", "completed"]
        assert await store.conflicts("r1") == []
    finally:
        await store.aclose()


@tool
def look(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up.
    """
    return "v"


async def test_a_run_recorded_with_two_configurations_resumes_each_with_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run an earlier release recorded with two configurations under one name (the
    first kept for the name): a session of the second resumes with its own system
    prompt — the agent passed, whose fingerprint it matched — not the first one's."""
    a = Agent(name="a", model="m", instructions="You are A", tools=[look])
    b = Agent(name="a", model="m", instructions="You are B", tools=[look])
    prompts: list[str] = []

    def handler(req: Any) -> Reply:
        system = req.messages[0]["content"]
        prompts.append(system)
        if system == "You are A" or any(m["role"] == "tool" for m in req.messages):
            return Reply.text("done")
        return Reply.tool_call("look", {"key": "k"}, call_id="c1")

    run: asyncio.Task[object] | None = None

    def cut(event: Event) -> None:
        if event.type == "turn_end" and event.session_id == "sB" and run is not None:
            run.cancel()

    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        with monkeypatch.context() as earlier_release:
            earlier_release.setattr(_durable, "check_one_config_per_name", lambda agents: None)
            fleet = Fleet(MockTransport(handler), store=store, callbacks=[cut], max_concurrency=1)
            sessions = [a.session("x", session_id="sA"), b.session("y", session_id="sB")]
            run = asyncio.ensure_future(fleet.run(sessions, run_id="r1"))
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(run, GUARD_S)
    finally:
        await store.aclose()
    assert prompts == ["You are A", "You are B"]  # sA done, sB cut after its tool call
    prompts.clear()
    store = SQLiteStore(path)
    try:
        assert await store.conflicts("r1") == ["agent agent a: two configurations in one run"]
        result = await Fleet(MockTransport(handler), store=store).resume("r1", agents=[b])
    finally:
        await store.aclose()
    assert prompts == ["You are B"]
    resumed = {s.session_id: s for s in result.sessions}
    assert resumed["sB"].status == "completed"
    assert resumed["sB"].messages[0] == {"role": "system", "content": "You are B"}
