"""Liveness (#12.4): only data events keep a stream alive, and every attempt has an end.

The servers are raw asyncio sockets on the test's loop; the tests run on the virtual
clock (:func:`~agentflow.embedded.run_virtual`), so the limits are the real defaults or
seconds-long ones, the servers' pauses are exact, and no test waits on the wall clock.
Durations asserted here are virtual: they follow from the limits by design.
Every test runs on all three transports.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, ConnectError, Fleet, Replica, StreamTimeout, Timeouts, TurnTrace
from agentflow.embedded import loop_clock, run_virtual
from agentflow.llamacpp import free_port
from agentflow.transport import ChatRequest
from tests.transport.rawserver import KINDS, chunk, content, head, make_transport, raw_server

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])

#: Default RetryPolicy backoff waits before attempts 2, 3 and 4 are at most 0.5, 1 and 2 s.
MAX_BACKOFF_TOTAL = 0.5 + 1 + 2


async def stream_timed(kind: str, base_url: str, timeouts: Timeouts | None) -> tuple[object, float]:
    """Stream REQ; return the trace or the error, and the virtual seconds it took."""
    loop = asyncio.get_running_loop()
    t = make_transport(kind, base_url, timeouts=timeouts)
    start = loop.time()
    try:
        try:
            out: object = await t.stream(REQ)
        except StreamTimeout as exc:
            out = exc
        return out, loop.time() - start
    finally:
        await t.aclose()


@pytest.mark.parametrize("kind", KINDS)
def test_comments_only_stream_times_out(kind: str) -> None:
    """A server that sends nothing but ``: keep-alive`` comments (one a second) is timed
    out by the idle limit, as a silent one is. (If comments still reset the limit, the
    server gives up after 60 comments and the stream ends unfinished instead.)"""
    sent = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        writer.write(head())
        for _ in range(60):
            writer.write(chunk(b": keep-alive\n\n"))
            await writer.drain()
            sent += 1
            await asyncio.sleep(1.0)
        writer.write(chunk(b""))
        await writer.drain()

    async def main() -> tuple[object, float]:
        async with raw_server(answer) as srv:
            return await stream_timed(kind, srv.base_url, Timeouts(idle=5.0))

    err, elapsed = run_virtual(main())
    assert isinstance(err, StreamTimeout), err
    assert err.phase == "idle" and err.timeout_s == 5.0
    assert "no data event for 5.0 s" in str(err)
    assert sent >= 5  # the comments did flow: they just do not count
    assert 5.0 <= elapsed < 6.0


@pytest.mark.parametrize("kind", KINDS)
def test_comments_between_sparse_data_events_do_not_hold_it_open(kind: str) -> None:
    """Data every 8 s with a comment every second, idle 5 s: the gap after the first data
    event times out, and the partial trace keeps that event."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        for i in range(4):
            writer.write(chunk(content(f"w{i} ")))
            for _ in range(8):
                await asyncio.sleep(1.0)
                writer.write(chunk(b": ping\n\n"))
                await writer.drain()
        writer.write(chunk(content("", "stop") + b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def main() -> tuple[object, float]:
        async with raw_server(answer) as srv:
            return await stream_timed(kind, srv.base_url, Timeouts(idle=5.0))

    err, _ = run_virtual(main())
    assert isinstance(err, StreamTimeout) and err.phase == "idle", err
    assert err.trace is not None and err.trace.content == "w0 "


@pytest.mark.parametrize("kind", KINDS)
def test_data_events_keep_a_stream_longer_than_idle_alive(kind: str) -> None:
    """Data every 4 s (comments between), idle 5 s: 20 s of stream finish normally."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        for i in range(5):
            writer.write(chunk(content(f"w{i} ")))
            for _ in range(4):
                await asyncio.sleep(1.0)
                writer.write(chunk(b": ping\n\n"))
                await writer.drain()
        writer.write(chunk(content("", "stop") + b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def main() -> tuple[object, float]:
        async with raw_server(answer) as srv:
            return await stream_timed(kind, srv.base_url, Timeouts(idle=5.0))

    trace, elapsed = run_virtual(main())
    assert isinstance(trace, TurnTrace), trace
    assert trace.content == "w0 w1 w2 w3 w4 " and trace.done
    assert elapsed >= 20.0  # four times the idle limit


@pytest.mark.parametrize("kind", KINDS)
def test_server_that_never_answers_fails_after_bounded_attempts(kind: str) -> None:
    """A server that accepts and reads the request but never sends a byte: with the
    default Timeouts and RetryPolicy, each attempt ends at the idle limit (300 s) and the
    turn fails after 4 attempts — 4 × 300 s plus at most 3.5 s of backoff, as documented."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10**6)

    agent = Agent(name="a", model="m", instructions="x")

    async def main() -> tuple[object, float, int]:
        loop = asyncio.get_running_loop()
        async with raw_server(answer) as srv:
            t = make_transport(kind, srv.base_url)
            fleet = Fleet(Replica(transport=t, breaker_threshold=1000), clock=loop_clock)
            start = loop.time()
            try:
                result = await fleet.run([agent.session("hi")])
            finally:
                await t.aclose()
            return result.sessions[0].error, loop.time() - start, srv.requests

    err, elapsed, requests = run_virtual(main())
    assert isinstance(err, StreamTimeout), err
    assert err.phase == "idle" and err.timeout_s == Timeouts().idle == 300.0
    assert requests == 4
    assert 4 * 300.0 <= elapsed <= 4 * 300.0 + MAX_BACKOFF_TOTAL + 1.0


@pytest.mark.parametrize("kind", KINDS)
def test_default_total_limit_ends_a_stream_that_never_finishes(kind: str) -> None:
    """A server sending a data event every 70 s, forever (it gives up after 40): idle
    never fires, the default total limit (1800 s) does, keeping the 26 events sent by
    then (at 0, 70, …, 1750 s)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        for i in range(40):
            writer.write(chunk(content(f"{i} ")))
            await writer.drain()
            await asyncio.sleep(70.0)
        writer.write(chunk(content("", "stop") + b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def main() -> tuple[object, float]:
        async with raw_server(answer) as srv:
            return await stream_timed(kind, srv.base_url, None)

    err, elapsed = run_virtual(main())
    assert isinstance(err, StreamTimeout), err
    assert err.phase == "total" and err.timeout_s == 1800.0
    assert err.trace is not None and len(err.trace.chunk_ns) == 26
    assert 1800.0 <= elapsed < 1801.0


def test_default_timeouts_are_all_finite_but_first_token() -> None:
    """Every wait of an attempt has a finite default; first_token is covered by idle."""
    t = Timeouts()
    assert (t.connect, t.idle, t.total, t.first_token) == (10.0, 300.0, 1800.0, None)


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
def test_a_request_that_fails_early_leaves_no_timer_behind(kind: str) -> None:
    """Nothing listening: ConnectError before any response. The idle watchdog of that
    attempt is stopped with it — before #12 it stayed armed and, one idle period later,
    failed inside the event loop ("Cannot change state of finished Timeout")."""

    async def main() -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
        url = f"http://127.0.0.1:{free_port()}/v1"
        t = make_transport(kind, url, timeouts=Timeouts(idle=5.0), connect_retries=0)
        try:
            with pytest.raises(ConnectError):
                await t.stream(REQ)
            await asyncio.sleep(20.0)  # four idle periods, on the virtual clock
        finally:
            await t.aclose()
        return errors

    assert run_virtual(main()) == []
