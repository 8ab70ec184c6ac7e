"""A run store keeps one configuration per agent name in a run: a run whose sessions
hold two different agents under one name is refused when it starts, before anything is
recorded. (It used to be recorded with the first configuration only: the other agent's
sessions read back — ``load_result``, ``agentflow report --store`` — and resumed with the
first agent's system prompt, silently.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.store import Store
from agentflow.testing import MockTransport, Reply

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
