"""``Fleet(workers=N).resume`` admits every session to run at once
(``DurableRun.admit_all``): when one admission fails, the others stop — none goes on
claiming a lease after the attempt gave up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentflow import Agent, StoreError
from agentflow._session import Session, SessionResult
from agentflow.store import SQLiteStore
from agentflow.store._durable import DurableRun


class _Gate:
    """Admits ``s00`` after the others have started, by failing; the others wait for a
    claim that would come later."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.cancelled: list[str] = []
        self.admitted: list[str] = []
        self.others_waiting = asyncio.Event()

    async def admit(self, s: Session) -> Session | SessionResult:
        if s.session_id == "s00":
            await self.others_waiting.wait()
            raise StoreError("lost the store while claiming s00")
        self.waiting.append(s.session_id)
        if len(self.waiting) == 2:
            self.others_waiting.set()
        try:
            await asyncio.sleep(3600)  # a claim that comes later; cancelled first
        except asyncio.CancelledError:
            self.cancelled.append(s.session_id)
            raise
        self.admitted.append(s.session_id)
        return s


def test_a_failed_admission_cancels_the_others(tmp_path: Path) -> None:
    agent = Agent(name="a", model="m", instructions="be brief")
    sessions = [agent.session(f"task {i}", session_id=f"s{i:02d}") for i in range(3)]
    gate = _Gate()

    async def main() -> None:
        durable = DurableRun(SQLiteStore(tmp_path / "r.db"), "run", 1, 30.0, lambda: 0)
        durable.entries = list(sessions)
        durable.gate = gate  # type: ignore[assignment]
        with pytest.raises(StoreError, match="s00"):
            await asyncio.wait_for(durable.admit_all(), 60)
        # Already, not at the loop's shutdown (which cancels whatever is left).
        assert sorted(gate.cancelled) == ["s01", "s02"]

    asyncio.run(main())
    assert gate.admitted == []
