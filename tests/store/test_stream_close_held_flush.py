"""Leaving ``Fleet.stream`` under a deadline while the run's store flush hangs (a dead
server): the consumer's cancel reaches the run's shielded flush, which gives up (it goes
on in the background), and the consumer gets its cancel. The close used to wait for the
flush whatever the consumer's deadline said — a hang past it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from agentflow import Agent, Fleet
from agentflow.testing import MockTransport, Reply
from tests.store.test_close_after_cancel import HeldFlush
from tests.wait import GUARD_S, eventually


async def test_a_consumer_cancelled_while_the_flush_hangs_gets_its_cancel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = HeldFlush(tmp_path / "run.db")
    fleet = Fleet(MockTransport(lambda _: Reply.text("a b c")), store=store)
    sessions = [Agent(name="a", model="m").session(f"task {i}") for i in range(3)]

    async def consume() -> None:
        async with contextlib.aclosing(fleet.stream(sessions)) as events:
            async for event in events:
                if event.type == "turn_end":
                    break  # the close cancels the run, whose end flushes the store

    with caplog.at_level(logging.WARNING, logger="agentflow.store"):
        consumer = asyncio.create_task(consume())
        try:
            await eventually(lambda: store.waiting, "the run's end to flush")
            consumer.cancel()  # the consumer's deadline falls due
            done, _ = await asyncio.wait({consumer}, timeout=GUARD_S)
            assert consumer in done and consumer.cancelled()
            assert "store.flush_cancelled" in caplog.text
        finally:
            store.gate.set()
            await store.aclose()
