"""A recorded run cancelled while its end is being flushed: the flush goes on, shielded,
after the caller has gone. When the store was closed under it (the user's ``async with``
store ended first), it failed with nobody to hear — asyncio printed "Task exception was
never retrieved" and two tracebacks. Now it is one warning, ``store.close_failed``."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, Fleet
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply
from tests.wait import eventually


class HeldFlush(SQLiteStore):
    """A store whose flushes wait until :attr:`gate` opens."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = asyncio.Event()
        self.waiting = False

    async def flush(self) -> None:
        self.waiting = True
        await self.gate.wait()
        await super().flush()


async def test_a_flush_failing_after_its_caller_was_cancelled_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unheard: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unheard.append(context))
    try:
        store = HeldFlush(tmp_path / "run.db")
        fleet = Fleet(MockTransport(lambda _: Reply.text("ok")), store=store)
        with caplog.at_level(logging.WARNING, logger="agentflow.store"):
            run = asyncio.create_task(fleet.run([Agent(name="a", model="m").session("go")]))
            await eventually(lambda: store.waiting, "the run's end to flush")
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            await store.aclose()
            store.gate.set()
            await eventually(lambda: "store.close_failed" in caplog.text, "the warning")
        del run
        gc.collect()
        assert unheard == []
        assert "the store is closed" in caplog.text
    finally:
        loop.set_exception_handler(None)
