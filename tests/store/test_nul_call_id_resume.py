"""A run whose tool call's id holds a NUL (a server's ``\\u0000`` in the id) resumes on
PostgreSQL as on SQLite: the recorded result is found, the tool does not run again.
PostgreSQL keeps the NUL as U+FFFD in ``tool_calls.call_id`` and as itself in the turn's
trace (JSON), so the result no longer matched its call: the resume failed ("no recorded
result") or, on the last recorded turn, ran the tool again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agentflow import Agent, Event, Fleet
from agentflow.store import Store
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import HTTPTransport

from ..wait import GUARD_S

ran: list[str] = []


def look(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up.
    """
    ran.append(key)
    return "v-" + key


def _agent() -> Agent:
    return Agent(name="a", model="m", tools=[look], params={"max_tokens": 16})


async def _first(store: Store, calls: int) -> None:
    """Run ``s0``: ``calls`` turns each calling ``look`` (the first call's id holds a
    NUL); cancelled at the last one's result (recorded before its event)."""
    replies = [Reply.tool_call("look", {"key": "k1"}, call_id="call\x00one")]
    replies += [Reply.tool_call("look", {"key": "k2"}, call_id="call_two")][: calls - 1]
    replies.append(Reply.text("never"))
    results = 0
    task: asyncio.Task[object] | None = None

    def cut(event: Event) -> None:
        nonlocal results
        if event.type == "tool_result":
            results += 1
            if results == calls and task is not None:
                task.cancel()

    async with ScriptedServer(replies) as server, HTTPTransport(server.base_url) as tr:
        fleet = Fleet(tr, max_concurrency=1, store=store, callbacks=[cut])
        task = asyncio.ensure_future(
            fleet.run([_agent().session("T", session_id="s0")], run_id="r1")
        )
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, GUARD_S)
    await store.aclose()


async def _resume(store: Store) -> tuple[str, str | None]:
    async with ScriptedServer([Reply.text("done")]) as server, HTTPTransport(server.base_url) as tr:
        result = await asyncio.wait_for(
            Fleet(tr, store=store).resume("r1", agents=[_agent()]), GUARD_S
        )
    await store.aclose()
    (session,) = result.sessions
    return session.status, session.final_output


@pytest.mark.parametrize("calls", [1, 2], ids=["last-turn", "earlier-turn"])
def test_a_nul_in_a_tool_calls_id_resumes_with_its_recorded_result(
    make_store: Callable[[], Store], calls: int
) -> None:
    ran.clear()
    asyncio.run(_first(make_store(), calls))
    assert ran == ["k1", "k2"][:calls]
    assert asyncio.run(_resume(make_store())) == ("completed", "done")
    assert ran == ["k1", "k2"][:calls]  # no tool ran again
