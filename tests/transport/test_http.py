"""Both HTTP transports over real loopback HTTP: every stream shape and failure we know of.

Every wire test runs twice, against :class:`AiohttpTransport` (aiohttp) and
:class:`HTTPTransport` (asyncio.Protocol + httptools): the two must agree.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import pytest

from agentflow import (
    BadRequestError,
    ConnectError,
    Endpoint,
    HTTPTransport,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
    Timeouts,
)
from agentflow.llamacpp import free_port
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import AiohttpTransport, ChatRequest, parse_retry_after

from ..wait import eventually

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], params={"max_tokens": 8})

#: Either transport class; both take the same endpoint, timeouts and connect_retries.
MakeTransport: TypeAlias = Callable[..., AiohttpTransport | HTTPTransport]


@pytest.fixture(params=[AiohttpTransport, HTTPTransport], ids=["aiohttp", "protocol"])
def transport_cls(request: pytest.FixtureRequest) -> MakeTransport:
    """The transport under test: each wire test runs once per transport."""
    cls: MakeTransport = request.param
    return cls


async def stream_one(
    transport_cls: MakeTransport, reply: Reply, **kw: Any
) -> tuple[ScriptedServer, object]:
    async with ScriptedServer([reply]) as srv, transport_cls(srv.base_url, **kw) as t:
        return srv, await t.stream(REQ)


async def test_streamed_turn_and_request_shape(transport_cls: MakeTransport) -> None:
    """Auth, headers and extra body fields reach the server; usage is always asked for."""
    ep = Endpoint(
        base_url="http://127.0.0.1:1/v1",
        api_key="sk-secret",
        headers={"X-Team": "a"},
        extra_body={"top_k": 5},
    )
    async with ScriptedServer([Reply.text("one two three", cached_tokens=4)]) as srv:
        ep = Endpoint(
            base_url=srv.base_url, api_key=ep.api_key, headers=ep.headers, extra_body=ep.extra_body
        )
        req = ChatRequest(
            model="m",
            messages=REQ.messages,
            params={"temperature": 0},
            headers={"X-Session-ID": "s1"},
            extra_body={"seed": 7},
        )
        async with transport_cls(ep) as t:
            trace = await t.stream(req)
    seen = srv.requests[0]
    assert seen.headers["Authorization"] == "Bearer sk-secret"
    assert seen.headers["X-Team"] == "a" and seen.headers["X-Session-ID"] == "s1"
    assert seen.body["stream"] is True and seen.body["stream_options"] == {"include_usage": True}
    assert (seen.body["top_k"], seen.body["seed"], seen.body["temperature"]) == (5, 7, 0)
    assert trace.content == "one two three"
    assert trace.usage is not None and trace.usage.cached_tokens == 4
    assert trace.done and trace.finish_reason == "stop"
    assert len(trace.chunk_ns) == 3
    assert trace.sent_ns <= trace.headers_ns <= trace.chunk_ns[0] <= trace.end_ns


async def test_data_lines_split_across_reads_and_keepalives(transport_cls: MakeTransport) -> None:
    """Frames cut mid-line and sent as separate writes, with comments between, parse the same."""
    whole = b": ping\n\n" + b"".join(
        sse_frames(
            [
                {"choices": [{"index": 0, "delta": {"content": "ab"}}]},
                {"choices": [{"index": 0, "delta": {"content": "cd"}, "finish_reason": "stop"}]},
            ]
        )
    )
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    _, trace = await stream_one(transport_cls, Reply(frames=pieces, frame_delay_s=0.002))
    assert trace.content == "abcd" and trace.done  # type: ignore[attr-defined]


async def test_missing_done_after_finish_is_accepted(transport_cls: MakeTransport) -> None:
    """A stream that has a finish_reason but closes without [DONE] is complete; `done` says so."""
    frames = sse_frames(
        [{"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}],
        done=False,
    )
    _, trace = await stream_one(transport_cls, Reply(frames=frames))
    assert trace.content == "x" and not trace.done  # type: ignore[attr-defined]


async def test_missing_done_and_finish_is_a_protocol_error(transport_cls: MakeTransport) -> None:
    """A body that ends with neither [DONE] nor a finish_reason was cut short."""
    frames = sse_frames([{"choices": [{"index": 0, "delta": {"content": "x"}}]}], done=False)
    with pytest.raises(StreamProtocolError) as info:
        await stream_one(transport_cls, Reply(frames=frames))
    assert info.value.trace is not None and info.value.trace.content == "x"


async def test_malformed_json_over_http(transport_cls: MakeTransport) -> None:
    """A malformed chunk raises StreamProtocolError naming the payload; the connection is closed."""
    with pytest.raises(StreamProtocolError) as info:
        await stream_one(transport_cls, Reply(frames=[b"data: {not json\n\n"]))
    assert info.value.payload == b"{not json"


async def test_rate_limit_with_retry_after(transport_cls: MakeTransport) -> None:
    """429 becomes RateLimitError with the server's message and Retry-After in seconds."""
    with pytest.raises(RateLimitError) as info:
        await stream_one(transport_cls, Reply.error(429, "slow down", {"Retry-After": "3"}))
    assert info.value.status == 429 and info.value.retry_after == 3.0
    assert "slow down" in str(info.value)


async def test_server_and_bad_request_errors(transport_cls: MakeTransport) -> None:
    """5xx is a ServerError; other 4xx a BadRequestError; a non-JSON body is kept as text."""
    with pytest.raises(ServerError):
        await stream_one(transport_cls, Reply.error(503))
    with pytest.raises(BadRequestError) as info:
        await stream_one(
            transport_cls, Reply.error(400, "This model's maximum context length is 8192 tokens.")
        )
    assert "maximum context length" in str(info.value)
    assert info.value.body["error"]["code"] == 400
    with pytest.raises(ServerError) as raw:
        await stream_one(transport_cls, Reply(frames=[b"upstream exploded"], status=502))
    assert raw.value.body == "upstream exploded"


async def test_connection_cut_mid_stream_keeps_partial_trace(transport_cls: MakeTransport) -> None:
    """A dropped connection after output raises StreamInterrupted carrying what arrived."""
    frames = sse_frames([{"choices": [{"index": 0, "delta": {"content": "partial"}}]}], done=False)
    with pytest.raises(StreamInterrupted) as info:
        await stream_one(transport_cls, Reply(frames=frames, cut=True))
    assert info.value.trace is not None and info.value.trace.content == "partial"


async def test_dropped_kept_alive_connection_is_resent_once(transport_cls: MakeTransport) -> None:
    """A reused connection closed before any response byte is resent on a new one
    (llama.cpp's quirk); on a new connection the same close is not resent: the server
    may have received the request (tests/transport/test_resend.py)."""
    async with (
        ScriptedServer([Reply.text("first"), Reply(drop=True), Reply.text("ok")]) as srv,
        transport_cls(srv.base_url) as t,
    ):
        await t.stream(REQ)
        trace = await t.stream(REQ)
        assert trace.content == "ok" and trace.reconnects == 1 and t.reconnects == 1
    assert len(srv.requests) == 3


async def test_nothing_listening_is_a_connect_error(transport_cls: MakeTransport) -> None:
    """No server: ConnectError after the configured resends, never a hang."""
    async with transport_cls(f"http://127.0.0.1:{free_port()}/v1", connect_retries=1) as t:
        with pytest.raises(ConnectError):
            await t.stream(REQ)
        assert t.reconnects == 1


async def test_first_token_timeout(transport_cls: MakeTransport) -> None:
    """No output within `first_token` seconds: StreamTimeout(phase='first_token')."""
    slow = Reply(frames=[b": queued\n\n", *Reply.text("late").frames], frame_delay_s=5)
    with pytest.raises(StreamTimeout) as info:
        await stream_one(transport_cls, slow, timeouts=Timeouts(first_token=0.2))
    assert info.value.phase == "first_token" and info.value.timeout_s == 0.2


async def test_idle_timeout_between_chunks(transport_cls: MakeTransport) -> None:
    """A stall with no bytes longer than `idle`: StreamTimeout(phase='idle')."""
    stall = Reply(frames=Reply.text("a b c").frames, frame_delay_s=5)
    with pytest.raises(StreamTimeout) as info:
        await stream_one(transport_cls, stall, timeouts=Timeouts(idle=0.2))
    assert info.value.phase == "idle"


async def test_steady_stream_longer_than_idle_does_not_time_out(
    transport_cls: MakeTransport,
) -> None:
    """Idle is the gap between reads: a stream that keeps coming outlives its idle limit.
    (The stream lasts longer than the limit; each gap is a tenth of it, a margin no load
    on the machine eats.)"""
    steady = Reply(frames=Reply.text("a b c d e f g h").frames, frame_delay_s=0.05)
    assert len(steady.frames) * 0.05 > 0.5
    _, trace = await stream_one(transport_cls, steady, timeouts=Timeouts(idle=0.5))
    assert trace.content == "a b c d e f g h"  # type: ignore[attr-defined]


async def test_error_body_sent_in_pieces_is_read_whole(transport_cls: MakeTransport) -> None:
    """An error body written in two parts still yields the server's message and code."""
    body = b'{"error": {"message": "overloaded, try later", "code": 503}}'
    async with ScriptedServer() as srv, transport_cls(srv.base_url) as t:
        srv.add(
            Reply(
                frames=[body[:20], body[20:]],
                status=503,
                frame_delay_s=0.05,
                headers={"Content-Type": "application/json"},
            )
        )
        with pytest.raises(ServerError) as info:
            await t.stream(REQ)
    assert "overloaded, try later" in str(info.value)
    assert info.value.body["error"]["code"] == 503


async def test_last_event_without_blank_line_is_kept(transport_cls: MakeTransport) -> None:
    """A final usage event with no blank line after it (then close) is not dropped."""
    frames = [
        *Reply.text("hi").frames[:-2],
        b'data: {"choices": [], "usage": {"prompt_tokens": 3}}',
    ]
    _, trace = await stream_one(transport_cls, Reply(frames=frames))
    assert trace.usage is not None and trace.usage.prompt_tokens == 3  # type: ignore[attr-defined]


async def test_total_timeout(transport_cls: MakeTransport) -> None:
    """A stream still going at `total` seconds: StreamTimeout(phase='total'), which keeps
    what had arrived (nothing lost: the retry policy records it as the failed attempt)."""
    drip = Reply(frames=Reply.text("a b c d e f g h").frames, frame_delay_s=0.25)
    assert len(drip.frames) * 0.25 > 2 * 1.0  # the stream would take twice the limit
    with pytest.raises(StreamTimeout) as info:
        await stream_one(transport_cls, drip, timeouts=Timeouts(total=1.0))
    assert info.value.phase == "total"
    partial = info.value.trace
    assert partial is not None and partial.finish_reason is None and not partial.done
    assert 0 < len(partial.chunk_ns) < 8 and "a" in partial.content


async def test_cancellation_closes_the_connection(transport_cls: MakeTransport) -> None:
    """Cancelling a turn mid-stream closes its connection (the server sees the client leave)."""
    async with (
        ScriptedServer([Reply(frames=Reply.text("a b c d e f").frames, frame_delay_s=0.05)]) as srv,
        transport_cls(srv.base_url) as t,
    ):
        task = asyncio.create_task(t.stream(REQ))
        await eventually(lambda: srv.requests, "the request to reach the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: srv.client_disconnects, "the server to see the client leave")
    assert srv.client_disconnects == 1


def test_endpoint_validation_names_the_field() -> None:
    """A bad base URL or an Authorization header in `headers` is a ConfigError naming the field."""
    from agentflow import ConfigError

    with pytest.raises(ConfigError, match="base_url"):
        Endpoint(base_url="127.0.0.1:8000")
    with pytest.raises(ConfigError, match="api_key"):
        Endpoint(base_url="http://h/v1", headers={"authorization": "Bearer x"})
    with pytest.raises(ConfigError, match=r"Timeouts\.idle"):
        Timeouts(idle=0)
    assert "sk-" not in repr(Endpoint(base_url="http://h/v1", api_key="sk-123"))


def test_request_body_always_streams_with_usage() -> None:
    """User params cannot turn off streaming or usage reporting; other options survive."""
    body = ChatRequest(
        model="m", messages=[], params={"stream_options": {"x": 1}}, extra_body={"stream": False}
    ).body()
    assert body["stream"] is True
    assert body["stream_options"] == {"x": 1, "include_usage": True}
    assert json.dumps(body)


@pytest.fixture(params=["America/New_York", "Asia/Tokyo"])
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process's local time zone set to one far from GMT, and restored after."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    try:
        yield request.param
    finally:
        monkeypatch.undo()
        time.tzset()


def test_retry_after_dates_are_gmt_whatever_the_local_zone(local_zone: str) -> None:
    """All three HTTP-date forms (RFC 9110), and a ``-0000`` zone, are GMT: 120 s from
    ``now`` in every local zone. The asctime form has no zone: read as local time it
    was off by the zone's offset (0 s in New York, 9 h in Tokyo)."""
    now = 1_700_000_000.0
    when = datetime.datetime.fromtimestamp(now + 120, datetime.UTC)
    forms = [
        when.strftime("%a, %d %b %Y %H:%M:%S GMT"),  # IMF-fixdate
        when.strftime("%A, %d-%b-%y %H:%M:%S GMT"),  # rfc850
        when.strftime("%a %b %e %H:%M:%S %Y"),  # asctime
        when.strftime("%a, %d %b %Y %H:%M:%S -0000"),
        when.strftime("%a, %d %b %Y %H:%M:%S +0000"),
    ]
    assert time.localtime(now).tm_gmtoff != 0, local_zone
    assert [parse_retry_after(v, now=now) for v in forms] == [120.0] * len(forms)
