""":class:`AiohttpTransport`'s aiohttp sessions: one of the user's, and its own on a second
event loop.

On the virtual clock (:func:`~agentflow.embedded.run_virtual`): the servers' pauses and the
session's timers take no real time.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agentflow import HTTPTransport, StreamTimeout, Timeouts
from agentflow.embedded import run_virtual
from agentflow.transport import AiohttpTransport

from .rawserver import TINY_REQUEST, chunk, content, head, raw_server


async def _slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A data event every 2 s, for a minute."""
    writer.write(head())
    for i in range(30):
        writer.write(chunk(content(f"w{i} ")))
        await writer.drain()
        await asyncio.sleep(2.0)


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """No answer at all, for an hour."""
    await asyncio.sleep(3600.0)


async def _with_session(
    answer: object, session_timeout: aiohttp.ClientTimeout, ours: Timeouts
) -> object:
    async with (
        raw_server(answer) as srv,  # type: ignore[arg-type]
        aiohttp.ClientSession(timeout=session_timeout) as session,
    ):
        t = AiohttpTransport(srv.base_url, session=session, timeouts=ours)
        try:
            return await t.stream(TINY_REQUEST)
        except StreamTimeout as exc:
            return exc
        finally:
            await t.aclose()


@pytest.mark.parametrize(
    ("answer", "timeout", "phase", "limit"),
    [
        (_slow, aiohttp.ClientTimeout(total=5), "total", 5.0),
        (_silent, aiohttp.ClientTimeout(total=5), "total", 5.0),
        (_slow, aiohttp.ClientTimeout(sock_read=1), "idle", 1.0),
    ],
    ids=["total-mid-stream", "total-before-head", "sock_read"],
)
def test_the_sessions_own_timeout_is_named_as_its(
    answer: object, timeout: aiohttp.ClientTimeout, phase: str, limit: float
) -> None:
    """The session's ClientTimeout ran out, not agentflow's limits (30 and 1800 s): it was
    reported as agentflow's total limit — phase "total", timeout_s 1800 — mid-stream, and
    as a StreamInterrupted before the response head."""
    err = run_virtual(_with_session(answer, timeout, Timeouts(idle=30.0)))
    assert isinstance(err, StreamTimeout), err
    assert err.phase == phase and err.timeout_s == limit, err
    assert "ClientTimeout" in str(err) and "session's own timeout" in str(err)
    assert err.trace is not None


def test_agentflows_own_limit_is_still_its_own() -> None:
    """A session with no timeout of its own: agentflow's total limit, named as such."""
    err = run_virtual(_with_session(_slow, aiohttp.ClientTimeout(total=None), Timeouts(total=5)))
    assert isinstance(err, StreamTimeout), err
    assert err.phase == "total" and err.timeout_s == 5.0
    assert "(total limit)" in str(err)
    assert err.trace is not None and err.trace.content.startswith("w0 ")


@pytest.mark.parametrize("cls", [AiohttpTransport, HTTPTransport])
def test_a_transport_streams_on_a_second_event_loop(cls: type, thread_server: str) -> None:
    """One transport, two asyncio.run calls: AiohttpTransport kept the session made on the
    first loop, and failed on the second with RuntimeError("Event loop is closed")."""
    t = cls(thread_server)
    for _ in range(2):
        trace = asyncio.run(t.stream(TINY_REQUEST))
        assert trace.content == "fine"
    asyncio.run(t.aclose())
