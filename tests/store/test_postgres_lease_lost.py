"""A session whose lease another worker took stops at its next step, with
``LeaseLost`` as its error in the run's result. The renewal that found the loss used
to be only logged: the session went on calling the model and running its tools (with
their side effects) for the rest of its life, every record refused, and the fleet
reported it completed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from agentflow import Agent, Fleet, LeaseLost, StoreError
from agentflow.store import LeaseOwner, PostgresStore
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest

from ..wait import GUARD_S


class NoticesLoss(PostgresStore):
    """A store that says when a renewal no longer holds a lease it held before."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.noticed = asyncio.Event()

    async def renew(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
        still = await super().renew(run_id, owner, ttl_s)
        if not still:
            self.noticed.set()
        return still


@pytest.mark.parametrize("found", ["during a tool", "during a model call"])
def test_a_session_whose_lease_is_taken_stops_at_its_next_step(
    postgres_db: str, found: str
) -> None:
    """The loss is found while a tool runs (its result is the next step) or while the
    model answers (the turn is): either way, no later tool runs here."""
    ran: list[int] = []

    def take_over() -> None:  # another worker's claim, after this one's lease expired
        with psycopg.connect(postgres_db, autocommit=True) as conn:
            conn.execute(
                "UPDATE agentflow.sessions SET lease_owner = 'other-host:1:abc',"
                " lease_expires_ns = lease_expires_ns + 3600000000000"
            )

    async def main() -> None:
        store = NoticesLoss(postgres_db)

        async def act(step: int) -> str:
            """Do one step with a side effect.

            Args:
                step: which step.
            """
            ran.append(step)
            if step == 0:
                await asyncio.to_thread(take_over)
                if found == "during a tool":
                    await asyncio.wait_for(store.noticed.wait(), GUARD_S)  # a renewal saw it
            return f"did {step}"

        async def model(request: ChatRequest) -> Reply:
            turn = len(transport.requests) - 1
            if turn == 1 and found == "during a model call":
                await asyncio.wait_for(store.noticed.wait(), GUARD_S)
            if turn < 5:
                return Reply.tool_call("act", {"step": turn}, call_id=f"c{turn}")
            return Reply.text("all done")

        agent = Agent(name="a", model="m", tools=[act], params={"max_tokens": 8}, max_turns=20)
        transport = MockTransport(model)
        fleet = Fleet(transport, store=store, lease_ttl_s=0.3)
        result = await asyncio.wait_for(
            fleet.run([agent.session("Go", session_id="s0")], run_id="r"), GUARD_S
        )
        await store.aclose()
        (session,) = result.sessions
        assert session.status == "error" and isinstance(session.error, LeaseLost)
        assert isinstance(session.error, StoreError)
        assert (session.error.run_id, session.error.session_id) == ("r", "s0")
        assert "lease was taken by another worker" in str(session.error)
        assert len(session.turns) == (1 if found == "during a tool" else 2)

    asyncio.run(main())
    assert ran == [0]  # the tools of later turns never ran here
    with psycopg.connect(postgres_db) as conn:
        row = conn.execute("SELECT status, lease_owner FROM agentflow.sessions").fetchone()
    assert row == ("pending", "other-host:1:abc")  # the other worker's to end


def test_a_lease_lost_before_a_turn_is_sent_stops_it_unsent(tmp_path: Path) -> None:
    """A loss the recorder knows of as a turn is about to go (a renewal between two
    turns found it) stops the session before its request: the model is not asked
    again, and nothing is appended."""
    from agentflow.store import SQLiteStore
    from agentflow.store._recorder import Recorder

    async def main() -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        recorder = Recorder(store, "r", 1)
        transport = MockTransport(lambda request: Reply.text("hi"))
        agent = Agent(name="a", model="m", max_turns=3)
        session = agent.session("Go", session_id="s0")
        session._log = recorder
        recorder.lost.add("s0")
        try:
            result = await session.run(transport)
        finally:
            await store.aclose()
        assert result.status == "error" and isinstance(result.error, LeaseLost)
        assert transport.requests == [] and result.turns == []
        assert [m["role"] for m in result.messages] == ["user"]

    asyncio.run(main())
