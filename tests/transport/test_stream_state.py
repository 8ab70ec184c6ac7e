"""StreamState: the one read loop every transport feeds (SSE → trace → first output → end)."""

from __future__ import annotations

import asyncio
import gc
import itertools

import pytest

from agentflow._errors import APIStatusError, StreamProtocolError, StreamTimeout
from agentflow.embedded import run_virtual
from agentflow.transport import Timeouts
from agentflow.transport._stream import StreamState

CHUNK = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
FINISH = b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'


def _clock() -> itertools.count[int]:
    return itertools.count(1000, 1000)


def test_reads_are_fed_at_the_time_the_transport_gives() -> None:
    clock = _clock()
    st = StreamState("http://x", clock.__next__)
    st.headers_at(5)
    st.read(CHUNK[:10], 7)  # half an event: nothing yet
    assert st.n_chunks == 0
    st.read(CHUNK[10:] + CHUNK, 11)  # the stamp of the read that completed them
    st.read(FINISH, 13)
    trace = st.finish({"x-a": "1"}, end_ns=20)
    # The stamp a transport gives (a kernel stamp, on HTTPTransport) is the first output's
    # time, not the clock's (which reads 2000 and up here).
    assert trace.chunk_ns == (11, 11) and trace.first_output_ns == 11
    assert trace.headers_ns == 5 and trace.sent_ns == 1000
    assert trace.content == "hihi" and trace.response_headers == {"x-a": "1"}


def test_only_data_events_move_the_idle_mark() -> None:
    st = StreamState("http://x", _clock().__next__)
    sent = st.last_ns
    st.read(b": ping\n\n", 50)
    assert st.last_ns == sent
    st.read(CHUNK, 60)
    assert st.last_ns == 60


def test_a_last_event_without_a_blank_line_is_fed_at_the_end() -> None:
    st = StreamState("http://x", _clock().__next__)
    st.read(CHUNK, 10)
    st.read(FINISH[:-2], 12)
    st.end(30)
    trace = st.finish({}, end_ns=31)
    assert trace.finish_reason == "stop" and trace.chunk_ns == (10,)


def test_an_unfinished_stream_is_a_protocol_error_with_its_trace() -> None:
    st = StreamState("http://x", _clock().__next__, reconnects=2)
    st.read(CHUNK, 10)
    with pytest.raises(StreamProtocolError, match="neither a finish_reason nor") as info:
        st.finish({})
    assert info.value.trace is not None and info.value.trace.reconnects == 2


def test_the_size_limit_error_carries_the_partial_trace() -> None:
    st = StreamState("http://x", _clock().__next__, max_event_bytes=64, reconnects=1)
    st.read(CHUNK, 10)
    with pytest.raises(StreamProtocolError, match="max_event_bytes") as info:
        st.read(b"data: " + b"x" * 100, 20)
    trace = info.value.trace
    assert trace is not None and trace.chunk_ns == (10,) and trace.reconnects == 1
    assert info.value.endpoint == "http://x"


def test_payloads_from_the_simulator_skip_the_decoder() -> None:
    st = StreamState("sim://x", _clock().__next__)
    st.payloads([CHUNK[6:-2], b"[DONE]"], 40)
    trace = st.finish({}, end_ns=50)
    assert trace.done and trace.chunk_ns == (40,) and trace.end_ns == 40


def test_first_output_ends_the_first_token_limit() -> None:
    """On virtual time: the first output lifts the first-token limit, so waiting past it
    afterwards is no timeout."""

    async def main() -> str | None:
        st = StreamState(
            "http://x", _clock().__next__, timeouts=Timeouts(first_token=0.05, idle=None, total=5)
        )
        assert st.waiting_first and st.limits is not None
        limits = st.limits
        async with limits.scope():
            st.read(b": ping\n\n", 1)
            seen = [limits.waiting_first]  # a comment is no output
            st.read(CHUNK, 2)
            seen.append(limits.waiting_first)
            assert seen == [True, False]
            await asyncio.sleep(0.1)  # past the first-token limit: it no longer applies
            st.read(FINISH, 3)
        return st.finish({}).finish_reason

    assert run_virtual(main()) == "stop"


def test_the_idle_watchdog_reads_the_states_mark() -> None:
    """On virtual time (a busy machine cannot stretch the 50 ms gaps past the 200 ms
    limit): data every 50 ms holds the idle limit off, silence does not."""

    async def main() -> tuple[StreamTimeout, float]:
        loop = asyncio.get_running_loop()
        st = StreamState(
            "http://x",
            lambda: int(loop.time() * 1e9),
            timeouts=Timeouts(first_token=None, idle=0.2, total=30),
        )
        assert st.limits is not None
        limits = st.limits

        async def run() -> None:
            async with limits.scope():
                for _ in range(4):  # data every 50 ms holds a 200 ms idle limit off…
                    await asyncio.sleep(0.05)
                    st.read(CHUNK, int(loop.time() * 1e9))
                await asyncio.sleep(5)  # …silence does not

        with pytest.raises(TimeoutError):
            await run()
        return st.timeout(), loop.time()

    err, ended = run_virtual(main())
    assert isinstance(err, StreamTimeout) and err.phase == "idle"
    assert err.trace is not None and len(err.trace.chunk_ns) == 4
    assert ended == pytest.approx(0.4)  # the last data at 0.2 s, then 0.2 s of silence


async def test_limits_drop_the_stream_when_the_scope_ends() -> None:
    """Deadlines and the state refer to each other only while the stream runs, so a
    finished stream is freed by reference counting, not left to the cyclic collector."""
    st = StreamState("http://x", _clock().__next__, timeouts=Timeouts())
    limits = st.limits
    assert limits is not None
    async with limits.scope():
        st.read(CHUNK + FINISH, 5)
    assert limits._stream is None
    assert gc.get_referents(limits).count(st) == 0


def test_an_error_object_in_the_stream_carries_the_resends_on_its_trace() -> None:
    """Its trace said 0 resends, whatever happened: every other error's says how many."""
    st = StreamState("http://x", _clock().__next__, reconnects=2)
    st.read(CHUNK, 10)
    with pytest.raises(APIStatusError) as info:
        st.read(b'data: {"error": {"message": "overloaded", "code": 503}}\n\n', 20)
    trace = info.value.trace
    assert trace is not None and trace.chunk_ns == (10,) and trace.reconnects == 2
