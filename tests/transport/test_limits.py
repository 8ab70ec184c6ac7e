"""Bounded input (#12.7, #12.9): event size, parsing work, usage figures, content types.

Decoder tests feed :class:`SSEDecoder` directly; wire tests run each transport against
a real loopback server (``ScriptedServer`` or a raw asyncio socket server) and count
what the server received. No test measures time: the parser's linearity is checked
with its work counter (bytes searched), which grew with the square of the input before.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow import (
    Agent,
    ConfigError,
    Fleet,
    HTTPTransport,
    Replica,
    RetryPolicy,
    StreamProtocolError,
    Timeouts,
    UnexpectedContentType,
)
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import (
    DEFAULT_MAX_EVENT_BYTES,
    AiohttpTransport,
    ChatRequest,
    OpenAITransport,
    SSEDecoder,
    TraceBuilder,
)
from agentflow.transport._stream import StreamState
from tests.transport.rawserver import KINDS, chunk, head, make_transport, raw_server

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
MiB = 2**20
READ = b"x" * (64 * 1024)


# -- the decoder: bounded and linear ------------------------------------------------------


def test_unterminated_32mib_event_stops_at_the_default_limit() -> None:
    """A 32 MiB event that never ends, in 64 KiB reads: a StreamProtocolError naming the
    limit once 4 MiB are held, and the held bytes are let go."""
    dec = SSEDecoder()
    fed = 0

    def feed_32mib() -> None:
        nonlocal fed
        dec.feed(b"data: ")
        for _ in range(32 * MiB // len(READ)):
            dec.feed(READ)
            fed += len(READ)

    with pytest.raises(StreamProtocolError, match=r"max_event_bytes=4194304") as info:
        feed_32mib()
    assert DEFAULT_MAX_EVENT_BYTES - len(READ) <= fed <= DEFAULT_MAX_EVENT_BYTES
    assert info.value.payload is None and dec.pending == 0
    assert dec.scanned <= fed + 2 * len(READ)  # each read searched once


def test_32mib_event_is_parsed_in_linear_work() -> None:
    """With the limit raised, a 32 MiB event in 64 KiB reads comes out whole, and the
    bytes searched are the bytes fed — not the ~8 GiB a re-scan of the held buffer on
    every read costs (the decoder before #12 took 7.3 s of CPU here)."""
    dec = SSEDecoder(max_event_bytes=64 * MiB)
    n = 32 * MiB // len(READ)
    assert dec.feed(b"data: ") == []
    for _ in range(n):
        assert dec.feed(READ) == []
    assert dec.pending == 6 + n * len(READ)
    payload, one = dec.feed(b"\n\ndata: 1\n\n")
    assert len(payload) == n * len(READ) and one == b"1"
    assert dec.feed(b"data: 2\n\n") == [b"2"]
    total = 6 + n * len(READ) + len(b"\n\ndata: 1\n\n")
    assert dec.scanned <= total + 16


def test_tiny_reads_with_crlf_stay_linear() -> None:
    """A 256 KiB event with CRLF line ends cut into 7-byte reads (every CRLF and the
    blank line split somewhere): the right payload, each byte searched about once."""
    body = b"data: " + b"y" * (256 * 1024) + b"\r\ndata: z\r\n\r\n"
    dec = SSEDecoder()
    out: list[bytes] = []
    for i in range(0, len(body), 7):
        out += dec.feed(body[i : i + 7])
    assert out == [b"y" * (256 * 1024) + b"\nz"]
    assert dec.scanned <= 2 * len(body)


def test_a_whole_event_in_one_read_is_held_to_the_limit_too() -> None:
    """An over-long event that arrives complete in one read is refused as well."""
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(StreamProtocolError, match="max_event_bytes=1000"):
        dec.feed(b"data: 1\n\ndata: " + b"x" * 2000 + b"\n\n")
    assert SSEDecoder(max_event_bytes=1000).feed(b"data: " + b"x" * 990 + b"\n\n")


def _chunk_event(text: str) -> bytes:
    (frame,) = sse_frames([{"choices": [{"index": 0, "delta": {"content": text}}]}], done=False)
    return frame


_SECOND = _chunk_event("second")


@pytest.mark.parametrize(
    "reads",
    [
        [_chunk_event("first"), _SECOND + b"data: " + b"x" * 300 + b"\n\n"],
        [_chunk_event("first"), _SECOND + b"data: " + b"x" * 300],
        [_chunk_event("first") + _SECOND[:20], _SECOND[20:] + b"data: " + b"x" * 300 + b"\n\n"],
    ],
    ids=["whole", "unended", "after-a-held-event"],
)
def test_events_before_a_too_long_one_in_its_read_are_on_the_trace(reads: list[bytes]) -> None:
    """A read holding whole events and then one over the limit: the whole ones are output
    received, on the error's partial trace (it held only the reads before: "first")."""
    state = StreamState("ep", itertools.count().__next__, max_event_bytes=200)
    *before, last = reads
    for i, data in enumerate(before):
        state.read(data, i)
    with pytest.raises(StreamProtocolError, match="max_event_bytes=200") as info:
        state.read(last, len(before))
    trace = info.value.trace
    assert trace is not None and trace.content == "firstsecond"


def test_empty_data_events_are_keep_alives() -> None:
    """``data:`` with nothing after it yields no payload (it is not JSON): a keep-alive."""
    dec = SSEDecoder()
    assert dec.feed(b"data: \n\n") == [] and dec.feed(b"data:\n\ndata: 1\n\n") == [b"1"]


def _reference(stream: bytes) -> list[bytes]:
    """The SSE spec's line-by-line reading of a whole stream (plus agentflow's two
    choices: empty data is dropped, a last event without a blank line is kept)."""
    out: list[bytes] = []
    data: list[bytes] | None = None
    for line in [*re.split(rb"\r\n|\r|\n", stream), b""]:
        if not line:
            if data is not None and b"\n".join(data):
                out.append(b"\n".join(data))
            data = None
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            data = [*(data or []), value[1:] if value.startswith(b" ") else value]
    return out


_line = st.one_of(
    st.binary(max_size=12)
    .filter(lambda b: b"\r" not in b and b"\n" not in b)
    .map(lambda b: b"data: " + b),
    st.just(b"data:"),
    st.just(b": ping"),
    st.just(b"event: x"),
    st.just(b"id: 7"),
)
_end = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.lists(st.tuples(_line, _end), min_size=1, max_size=4), max_size=8),
    blank=st.lists(_end, min_size=8, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=40),
)
def test_any_stream_cut_anywhere_matches_the_spec_reading(
    events: list[list[tuple[bytes, bytes]]], blank: list[bytes], cuts: list[int]
) -> None:
    """Mixed LF / CRLF / CR line ends, comments, other fields, empty data, and reads cut
    at any byte (mid-CRLF included): the payloads are the reference reading's."""
    stream = b"".join(
        b"".join(line + end for line, end in ev) + blank[i] for i, ev in enumerate(events)
    )
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    dec = SSEDecoder()
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        out += dec.feed(stream[a:b])
    assert out + dec.flush() == _reference(stream)
    assert dec.scanned <= 2 * len(stream) + 2 * len(points)


# -- the decoder's limit on the wire -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_never_ending_event_on_the_wire_is_a_protocol_error(kind: str) -> None:
    """A server that streams one event forever (64 KiB writes): each transport stops at
    its ``max_event_bytes`` with a StreamProtocolError carrying the endpoint and trace."""

    async def answer(reader: Any, writer: Any) -> None:
        writer.write(head() + chunk(sse_frames([{"choices": []}], done=False)[0]))
        writer.write(chunk(b"data: "))
        for _ in range(64):  # 4 MiB, far past the limit below
            writer.write(chunk(READ))
            await writer.drain()

    async with raw_server(answer) as srv:
        t = make_transport(kind, srv.base_url, max_event_bytes=256 * 1024)
        try:
            with pytest.raises(StreamProtocolError, match="max_event_bytes=262144") as info:
                await t.stream(REQ)
        finally:
            await t.aclose()
    err = info.value
    assert not isinstance(err, UnexpectedContentType) and not err.unfinished
    assert err.endpoint == srv.base_url.rstrip("/")
    assert err.trace is not None and err.trace.n_events == 1


# -- usage figures -----------------------------------------------------------------------


def _feed_usage(usage: dict[str, Any]) -> TraceBuilder:
    b = TraceBuilder(endpoint="http://h/v1", sent_ns=0)
    b.feed(json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).encode(), 1)
    b.feed(json.dumps({"choices": [], "usage": usage}).encode(), 2)
    return b


@pytest.mark.parametrize(
    ("usage", "named"),
    [
        ({"prompt_tokens": 5, "completion_tokens": -3}, "usage.completion_tokens=-3 is negative"),
        ({"prompt_tokens": 10**20, "completion_tokens": 1}, "usage.prompt_tokens=10000000000"),
        ({"completion_tokens": 2**31}, "usage.completion_tokens=2147483648 is more than"),
        ({"total_tokens": -1}, "usage.total_tokens=-1"),
        (
            {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}},
            "cached_tokens=11 > prompt_tokens=10",
        ),
        (  # DeepSeek's fields: a cache hit rate of 500% passed
            {"prompt_tokens": 10, "prompt_cache_hit_tokens": 50, "prompt_cache_miss_tokens": 0},
            "usage.prompt_cache_hit_tokens=50 > prompt_tokens=10",
        ),
        (
            {"completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 9}},
            "reasoning_tokens=9 > completion_tokens=4",
        ),
        ({"prompt_cache_hit_tokens": -2, "prompt_cache_miss_tokens": 5}, "hit_tokens=-2"),
        ({"completion_tokens": 1.5}, r"\$\.usage\.completion_tokens"),
        ({"completion_tokens": "12"}, r"\$\.usage\.completion_tokens"),
    ],
)
def test_implausible_usage_is_a_protocol_error(usage: dict[str, Any], named: str) -> None:
    """Negative, non-integer, absurdly large or self-contradicting counts: a
    StreamProtocolError naming the field and value, with the trace of what came before
    (output kept, the bad usage not)."""
    with pytest.raises(StreamProtocolError, match=named) as info:
        _feed_usage(usage)
    trace = info.value.trace
    assert trace is not None and trace.content == "hi" and trace.usage is None


def test_plausible_usage_passes() -> None:
    """Zeros, the bounds themselves and cached == prompt are all fine."""
    ok = {
        "prompt_tokens": 100_000_000,
        "completion_tokens": 0,
        "total_tokens": 100_000_000,
        "prompt_tokens_details": {"cached_tokens": 100_000_000},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    trace = _feed_usage(ok).finish(3)
    assert trace.usage is not None and trace.usage.cached_tokens == 100_000_000


@pytest.mark.parametrize("kind", KINDS)
async def test_absurd_usage_on_the_wire(kind: str) -> None:
    """A server reporting 10**20 completion tokens: a StreamProtocolError, not a metric."""
    frames = Reply.text("one two").frames
    usage = {"prompt_tokens": 3, "completion_tokens": 10**20, "total_tokens": 10**20 + 3}
    bad = [*frames[:-2], *sse_frames([{"choices": [], "usage": usage}])]
    async with ScriptedServer([Reply(frames=bad)]) as srv:
        t = make_transport(kind, srv.base_url)
        try:
            with pytest.raises(StreamProtocolError, match=r"completion_tokens=10{20}") as info:
                await t.stream(REQ)
        finally:
            await t.aclose()
    assert info.value.trace is not None and info.value.trace.content == "one two"


# -- content types -----------------------------------------------------------------------

HTML = b"<!DOCTYPE html><html><body><h1>Please sign in</h1></body></html>"
COMPLETION = json.dumps(
    {"object": "chat.completion", "choices": [{"message": {"content": "whole answer"}}]}
).encode()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("content_type", "body", "snippet"),
    [
        ("text/html; charset=utf-8", HTML, "Please sign in"),
        ("application/json", COMPLETION, "whole answer"),
    ],
)
async def test_2xx_page_or_document_is_refused_with_its_type_and_start(
    kind: str, content_type: str, body: bytes, snippet: str
) -> None:
    """A 200 with HTML (a proxy's page) or one JSON document (``stream`` ignored): an
    UnexpectedContentType naming the type and quoting the body."""
    reply = Reply(frames=[body], headers={"Content-Type": content_type})
    async with ScriptedServer([reply]) as srv:
        t = make_transport(kind, srv.base_url)
        try:
            with pytest.raises(UnexpectedContentType) as info:
                await t.stream(REQ)
        finally:
            await t.aclose()
    err = info.value
    assert err.content_type == content_type and err.status == 200
    assert content_type in str(err) and snippet in str(err) and "text/event-stream" in str(err)
    assert err.payload == body


@pytest.mark.parametrize("transport_cls", [HTTPTransport, AiohttpTransport])
async def test_connection_is_usable_after_a_refused_page(transport_cls: Any) -> None:
    """The page is read to its end, so the next request on the transport streams normally."""
    page = Reply(frames=[HTML], headers={"Content-Type": "text/html"})
    async with ScriptedServer([page, Reply.text("fine")]) as srv, transport_cls(srv.base_url) as t:
        with pytest.raises(UnexpectedContentType):
            await t.stream(REQ)
        assert (await t.stream(REQ)).content == "fine"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("content_type", [None, "text/event-stream; charset=utf-8", "text/plain"])
async def test_streams_without_the_exact_type_are_still_parsed(
    kind: str, content_type: str | None
) -> None:
    """A missing Content-Type, a charset parameter or ``text/plain`` is not refused."""
    frames = b"".join(Reply.text("ok then").frames)

    async def answer(reader: Any, writer: Any) -> None:
        writer.write(head(content_type) + chunk(frames) + chunk(b""))
        await writer.drain()

    async with raw_server(answer) as srv:
        t = make_transport(kind, srv.base_url)
        try:
            trace = await t.stream(REQ)
        finally:
            await t.aclose()
    assert trace.content == "ok then" and trace.done


# -- none of these is retried by default -------------------------------------------------

TOO_LONG = Reply(frames=[b"data: " + b"x" * (DEFAULT_MAX_EVENT_BYTES + 10)])
BAD_USAGE = Reply(
    frames=[
        *Reply.text("a").frames[:-2],
        *sse_frames([{"choices": [], "usage": {"prompt_tokens": -1}}]),
    ]
)
PAGE = Reply(frames=[HTML], headers={"Content-Type": "text/html"})


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (PAGE, UnexpectedContentType),
        (TOO_LONG, StreamProtocolError),
        (BAD_USAGE, StreamProtocolError),
    ],
    ids=["html", "event-too-long", "usage"],
)
async def test_not_retried_by_default(reply: Reply, error: type[Exception]) -> None:
    """Through a Fleet with the default RetryPolicy (4 attempts): the session fails on
    the first attempt — the server received exactly one request."""
    agent = Agent(name="a", model="m", instructions="x")
    replies = [reply, *[Reply.text("never used")] * 3]
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(Replica(transport=t)).run([agent.session("hi")])
    err = result.sessions[0].error
    assert isinstance(err, error) and not getattr(err, "unfinished", True)
    assert len(srv.requests) == 1
    assert not RetryPolicy().retryable(err)
    assert RetryPolicy(retry_protocol_errors=True).retryable(err)  # the documented opt-in


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize("transport_cls", [HTTPTransport, AiohttpTransport])
@pytest.mark.parametrize("value", [-1, True, 1.5])
def test_bad_connect_retries_is_a_config_error(transport_cls: Any, value: Any) -> None:
    """``connect_retries`` must be an int ≥ 0; the error names the field and value."""
    with pytest.raises(ConfigError, match=rf"connect_retries must be an int ≥ 0, got {value!r}"):
        transport_cls("http://127.0.0.1:1/v1", connect_retries=value)


def test_bad_limits_are_config_errors() -> None:
    """Event-size limits and time limits are checked when configured."""
    import openai

    for make in (
        lambda: SSEDecoder(max_event_bytes=0),
        lambda: HTTPTransport("http://h/v1", max_event_bytes=-5),
        lambda: AiohttpTransport("http://h/v1", max_event_bytes=1.5),  # type: ignore[arg-type]
        lambda: OpenAITransport(openai.AsyncOpenAI(api_key="k"), max_event_bytes=0),
    ):
        with pytest.raises(ConfigError, match="max_event_bytes must be an int ≥ 1"):
            make()
    with pytest.raises(ConfigError, match=r"Timeouts\.total must be finite"):
        Timeouts(total=float("inf"))
    with pytest.raises(ConfigError, match=r"Timeouts\.idle must be > 0 or None, got '5'"):
        Timeouts(idle="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeouts must be a Timeouts"):
        HTTPTransport("http://h/v1", timeouts=30)  # type: ignore[arg-type]
