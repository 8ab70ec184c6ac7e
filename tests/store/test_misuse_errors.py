"""Arguments of the wrong kind to ``Fleet.resume``, ``Fleet.run`` and ``Store.load`` are a
``ConfigError`` naming the argument. (``agents=None`` was a TypeError, ``agents=[1]`` an
AttributeError, ``run_config=[1]`` a TypeError not naming it; ``sessions="abc"`` was read
as the ids 'a', 'b', 'c' and silently matched nothing.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.store import Store
from agentflow.testing import MockTransport, Reply

A = Agent(name="a", model="m", instructions="hi")


def _fleet(store: Store) -> Fleet:
    return Fleet(MockTransport(lambda req: Reply.text("ok")), store=store)


@pytest.mark.parametrize(
    ("agents", "match"),
    [
        (None, r"agents= must be .* got NoneType"),
        ([1], r"agents= must hold Agent objects, got int"),
        ("a", r"agents= must be .* got str"),
        ({"a": 1}, r"agents= must map names to Agent, got int for 'a'"),
    ],
)
async def test_resume_refuses_agents_that_are_not_agents(
    make_store: Callable[[], Store], agents: Any, match: str
) -> None:
    store = make_store()
    try:
        await _fleet(store).run([A.session("x", session_id="s0")], run_id="r1")
        with pytest.raises(ConfigError, match=match):
            await _fleet(store).resume("r1", agents=agents)
        assert len((await store.load("r1")).attempts) == 1  # nothing started
    finally:
        await store.aclose()


async def test_run_refuses_a_run_config_that_is_not_a_mapping(
    make_store: Callable[[], Store],
) -> None:
    store = make_store()
    try:
        with pytest.raises(ConfigError, match=r"run_config must be a mapping .* got list"):
            await _fleet(store).run([A.session("y")], run_config=[1])  # type: ignore[arg-type]
        await store.open()
        assert await store.runs() == []
    finally:
        await store.aclose()


async def test_load_refuses_a_string_of_sessions(make_store: Callable[[], Store]) -> None:
    store = make_store()
    try:
        await _fleet(store).run([A.session("x", session_id="abc")], run_id="r1")
        with pytest.raises(ConfigError, match=r"sessions= must be a list of session ids"):
            await store.load("r1", sessions="abc")
        with pytest.raises(ConfigError, match=r"sessions= must hold session ids"):
            await store.load("r1", sessions=[1])  # type: ignore[list-item]
        assert [s.session_id for s in (await store.load("r1", ["abc"])).sessions] == ["abc"]
    finally:
        await store.aclose()
