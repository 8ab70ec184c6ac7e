"""A ``KeyboardInterrupt`` (the user's Ctrl-C) or ``SystemExit`` raised in a session's own
frame — a sync callback, say — ends the session as ``"cancelled"`` with that error, and is
raised on: the session used to end as ``"error"`` with no error at all, and a recorded
run stored it so, with no error text.

Each runs under its own ``asyncio.run``: the interrupt ends the loop, as Ctrl-C would.
The interrupted loop's tasks stay reachable from the error's traceback, kept in the
result; each test collects them before it ends (:func:`_collected`): asyncio logs the
task's interrupt as never retrieved when it is collected, and on Python 3.11 that log's
traceback parses source — inside a later ``ast.parse`` (pytest's), it broke that one.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply, ScriptedServer

AGENT = Agent(name="a", model="m")


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    yield
    gc.collect()


def _raising(exc: type[BaseException]) -> object:
    raised: list[bool] = []

    def on_event(event: Event) -> None:
        if event.type == "turn_end" and not raised:
            raised.append(True)
            raise exc

    return on_event


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_sync_callback_cancels_the_session(exc: type[BaseException]) -> None:
    session = AGENT.session("hi")
    transport = MockTransport(lambda request: Reply.text("a b c"))
    with pytest.raises(exc):
        asyncio.run(session.run(transport, callbacks=[_raising(exc)]))  # type: ignore[list-item]
    result = session.result
    assert result is not None
    assert result.status == "cancelled"
    assert isinstance(result.error, exc)
    assert len(result.turns) == 1


def test_a_recorded_run_stores_the_interrupted_session_as_cancelled(tmp_path: Path) -> None:
    sessions = [AGENT.session("hi", session_id=f"s{i}") for i in range(2)]

    async def run() -> None:
        async with (
            ScriptedServer([Reply.text("a b c")] * 2) as srv,
            HTTPTransport(srv.base_url) as transport,
            SQLiteStore(tmp_path / "runs.db") as store,
        ):
            fleet = Fleet(
                transport,
                store=store,
                max_concurrency=1,
                callbacks=[_raising(KeyboardInterrupt)],  # type: ignore[list-item]
            )
            await fleet.run(sessions, run_id="r1")

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run())
    first = sessions[0].result
    assert first is not None and first.status == "cancelled"
    assert isinstance(first.error, KeyboardInterrupt)

    async def load() -> list[tuple[str, str, str | None]]:
        async with SQLiteStore(tmp_path / "runs.db") as store:
            stored = await store.load("r1")
        return [(s.session_id, s.status, s.error) for s in stored.sessions]

    assert asyncio.run(load())[0] == ("s0", "cancelled", "KeyboardInterrupt")
