"""A NUL in a run id, a session id or an agent name is refused up front, the same on
both stores: PostgreSQL's TEXT cannot hold NUL, so PostgresStore kept such an id as
U+FFFD, and a lookup by the id given (a resume, a load) did not find the run — it raised,
where SQLiteStore, which keeps the NUL, found it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, RunNotFound
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import Store

from .fleets import agents, driver, run_ids

GUARD_S = 60.0


async def _run(store: Store, sessions: list[Any], run_id: str | None) -> None:
    transport = SimTransport(driver())
    try:
        fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store)
        await fleet.run(sessions, run_id=run_id)
    finally:
        await store.aclose()
        await transport.aclose()


def test_a_nul_in_a_run_id_is_refused_before_anything_is_recorded(
    make_store: Callable[[], Store],
) -> None:
    team = agents()
    with pytest.raises(ConfigError, match=r"run_id must not hold a NUL.*'r\\x00un'"):
        run_virtual(_run(make_store(), [team[0].session("task")], "r\x00un"))
    assert asyncio.run(run_ids(make_store())) == []


@pytest.mark.parametrize("where", ["session_id", "agent"])
def test_a_nul_in_a_session_id_or_agent_name_is_refused_before_anything_is_recorded(
    make_store: Callable[[], Store], where: str
) -> None:
    team = agents()
    if where == "session_id":
        bad = team[0].session("task", session_id="s1")
        bad.session_id = "s\x001"  # (Agent.session refuses it: this is the store's own check)
        match = r"session 's\\x001': session_id must not hold a NUL"
    else:
        agent = _named(team[0], "agent\x00-0")
        bad = agent.session("task", session_id="s1")
        match = r"session 's1': its agent's name must not hold a NUL.*'agent\\x00-0'"
    sessions = [team[1].session("task", session_id="s0"), bad]
    with pytest.raises(ConfigError, match=match):
        run_virtual(_run(make_store(), sessions, "run-1"))
    assert asyncio.run(run_ids(make_store())) == []


def test_a_run_id_with_a_nul_is_refused_by_resume_and_load(
    make_store: Callable[[], Store],
) -> None:
    """What was recorded is still found by its id; an id with a NUL is a ConfigError
    on both stores (PostgreSQL's raised a StoreError for the server's refusal of it,
    SQLite's a RunNotFound or the run whose id held it)."""
    team = agents()
    run_virtual(_run(make_store(), [team[0].session("task", session_id="s0")], "run-1"))

    async def main() -> None:
        store = make_store()
        try:
            await store.open()
            assert (await store.load("run-1")).run_id == "run-1"
            with pytest.raises(RunNotFound):
                await store.load("run-2")
            with pytest.raises(ConfigError, match=r"run_id must not hold a NUL"):
                await asyncio.wait_for(store.load("run-1\x00"), GUARD_S)
            transport = SimTransport(driver())
            try:
                fleet = Fleet(transport, clock=loop_clock, store=store)
                with pytest.raises(ConfigError, match=r"run_id must not hold a NUL"):
                    await fleet.resume("run-1\x00", agents=team)
            finally:
                await transport.aclose()
        finally:
            await store.aclose()

    run_virtual(main())


@pytest.mark.parametrize("where", ["run_id", "session_id", "agent"])
def test_a_lone_surrogate_in_an_id_is_refused_before_anything_is_recorded(
    make_store: Callable[[], Store], where: str
) -> None:
    """A lone surrogate (a non-UTF-8 byte of a command-line argument decodes to one)
    raised a bare UnicodeEncodeError from the store, or — in an agent's name — the fleet
    ran and ended with its SessionStarted record left out (not resumable)."""
    team = agents()
    run_id, sessions = "run-1", [team[0].session("task", session_id="s0")]
    if where == "run_id":
        run_id, match = "r\udcffun", r"run_id must not hold a lone surrogate \(U\+DCFF at index 1"
    elif where == "session_id":
        sessions.append(team[1].session("task", session_id="s1"))
        sessions[-1].session_id = "s\ud8001"  # (as above: Agent.session refuses it)
        match = r"session_id must not hold a lone surrogate \(U\+D800"
    else:
        agent = _named(team[1], "agent\ud800")
        sessions.append(agent.session("task", session_id="s1"))
        match = r"its agent's name must not hold a lone surrogate"
    with pytest.raises(ConfigError, match=match):
        run_virtual(_run(make_store(), sessions, run_id))
    assert asyncio.run(run_ids(make_store())) == []

    async def load() -> None:
        store = make_store()
        try:
            await store.open()
            with pytest.raises(ConfigError, match="lone surrogate"):
                await store.load("r\udcffun")
        finally:
            await store.aclose()

    asyncio.run(load())


def _named(agent: Agent, name: str) -> Agent:
    """``agent`` under ``name``, which ``Agent()`` refuses (no header can carry it): the
    store's own check is what is tested."""
    named = dataclasses.replace(agent)
    object.__setattr__(named, "name", name)
    return named
