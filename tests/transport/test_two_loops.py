"""One transport, two event loops at once (two threads): the second is refused with a
ConfigError, and the first keeps its connections until its own ``aclose``.

Used from a second loop while the first still ran, :class:`AiohttpTransport` closed the
first loop's connector from the wrong thread (its stream stalled until the idle limit,
then was sent again), and :class:`HTTPTransport` replaced the first loop's pool with a
second one, the first never closed. One loop after another (a second ``asyncio.run``)
still works: ``test_aiohttp_session.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentflow import ConfigError, HTTPTransport
from agentflow.transport import AiohttpTransport

from ..wait import GUARD_S
from .rawserver import TINY_REQUEST


@pytest.fixture
def other_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in another thread for the whole test."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(GUARD_S)
        loop.close()


def _on(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(GUARD_S)


def _open(t: Any) -> bool:
    """Whether ``t`` holds connections (a pool, an aiohttp session) not closed."""
    if isinstance(t, HTTPTransport):
        return t.pool is not None
    session = t._session
    return session is not None and not session.closed


@pytest.mark.parametrize("cls", [AiohttpTransport, HTTPTransport])
def test_a_transport_in_use_on_a_running_loop_refuses_a_second_one(
    cls: type, thread_server: str, other_loop: asyncio.AbstractEventLoop
) -> None:
    t = cls(thread_server)
    assert _on(other_loop, t.stream(TINY_REQUEST)).content == "fine"
    assert _open(t)

    async def here() -> None:
        with pytest.raises(ConfigError, match="make one transport per event loop"):
            await t.stream(TINY_REQUEST)
        await t.aclose()  # not this loop's to close: left to the other's aclose

    asyncio.run(here())
    assert _open(t)
    # The first loop's connections were not touched: it streams on, then closes them.
    assert _on(other_loop, t.stream(TINY_REQUEST)).content == "fine"
    _on(other_loop, t.aclose())
    assert not _open(t)
