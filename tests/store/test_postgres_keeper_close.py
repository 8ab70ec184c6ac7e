"""Closing a PostgresStore ends the task that renews the leases a refused release kept
at an attempt's end: it is cancelled as the store closes. It used to run on until its
next tick (a third of ``lease_ttl_s``, in real time), then renew on the closed store and
log a misleading ``store.release_failed``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from agentflow import StoreError
from agentflow.embedded import run_virtual
from agentflow.store import PostgresStore

from ..wait import eventually
from .fleets import end_with_tool_results_held

TTL_S = 6.0


def _keepers() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if "LeaseKeeper._keep" in repr(t.get_coro())}


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The coroutines ``task`` awaits, outermost first."""
    names: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_qualname)
        coro = coro.cr_await
    return names


def test_closing_the_store_ends_the_task_keeping_refused_leases(
    postgres_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db, statement_timeout_s=0.2)
        # the attempt's release is refused: its tool results are held
        blocker, transport = await end_with_tool_results_held(postgres_db, store, TTL_S)
        try:
            keepers = _keepers()
            assert len(keepers) == 1  # renewing the leases the refused release kept
            (keeper,) = keepers
            # Past its first renewal (at once), waiting for its next tick:
            await eventually(lambda: "Ticker.wait" in _awaiting(keeper), "the keeper's tick")
            caplog.clear()
            with contextlib.suppress(StoreError):  # (the held records: not written)
                await store.aclose()
            assert keeper.done()  # ended by the close, not at its next tick
            await asyncio.wait(keepers)
            assert "store.release_failed" not in caplog.text
        finally:
            blocker.close()
            await store.aclose()
            await transport.aclose()

    run_virtual(main())
