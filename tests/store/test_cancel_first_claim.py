"""``Fleet.run`` cancelled while its first lease claim is awaited ends its attempt: the
SQLite store's run lock, which the claim took, is given back at once. (It was kept until
the store closed: every later ``Fleet.resume`` of the run through that store was refused.)"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentflow import Agent, Fleet
from agentflow.store import SQLiteStore, _recorder
from agentflow.testing import MockTransport, Reply

from ..wait import GUARD_S

A = Agent(name="a", model="m", instructions="hi")


async def test_a_run_cancelled_in_its_first_claim_leaves_the_run_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    transport = MockTransport(lambda req: Reply.text("ok"))
    claim = _recorder.LeaseKeeper.claim
    run: asyncio.Task[object] | None = None

    async def cancelled_meanwhile(self: _recorder.LeaseKeeper, ids: Sequence[str]) -> list[str]:
        assert run is not None
        asyncio.get_running_loop().call_soon(run.cancel)  # as a Ctrl-C landing then would
        return await claim(self, ids)

    try:
        with monkeypatch.context() as patched:
            patched.setattr(_recorder.LeaseKeeper, "claim", cancelled_meanwhile)
            run = asyncio.ensure_future(
                Fleet(transport, store=store).run([A.session("x", session_id="s0")], run_id="r1")
            )
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(run, GUARD_S)
        for _ in range(2):  # through the same store, still open
            result = await asyncio.wait_for(
                Fleet(transport, store=store).resume("r1", agents=[A]), GUARD_S
            )
            assert [s.status for s in result.sessions] == ["completed"]
    finally:
        await store.aclose()
