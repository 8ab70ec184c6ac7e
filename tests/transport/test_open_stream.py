"""open_stream: the one construction of a request's StreamState for the transports with
limits (HTTPTransport, AiohttpTransport, OpenAITransport)."""

from __future__ import annotations

import pytest

from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest, Timeouts
from agentflow.transport._stream import open_stream
from tests.transport.rawserver import KINDS, make_transport

TIMEOUTS = Timeouts(connect=3.0, first_token=7.0, idle=5.0, total=60.0)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_state_carries_the_transports_settings(kind: str) -> None:
    ticks = iter(range(1000, 10**6, 1000))
    t = make_transport(
        kind, "http://127.0.0.1:9/v1", timeouts=TIMEOUTS, max_event_bytes=4096,
        clock=ticks.__next__,
    )  # fmt: skip
    try:
        st, limits = open_stream(t, None, 2)
        assert st.endpoint == t.endpoint == "http://127.0.0.1:9/v1"
        assert st.reconnects == 2 and st.decoder.max_event_bytes == 4096
        assert limits is st.limits and limits.timeouts is TIMEOUTS
        assert st.waiting_first  # a first-token limit is set
        assert st.last_ns == 1000  # sent when made, on the transport's clock
        assert open_stream(t, None)[0].reconnects == 0
    finally:
        await t.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_each_transport_streams_through_it(kind: str) -> None:
    """A whole request on a real loopback server: the trace is the state's, labelled with
    the transport's endpoint, and the sink saw every delta."""
    seen: list[str] = []

    class Sink:
        def on_delta(self, kind: str, text: str, t_ns: int) -> None:
            seen.append(text)

    async with ScriptedServer([Reply.text("one two three")]) as srv:
        t = make_transport(kind, srv.base_url, timeouts=TIMEOUTS)
        try:
            trace = await t.stream(
                ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}]),
                Sink(),
            )
        finally:
            await t.aclose()
    assert trace.content == "one two three" == "".join(seen)
    assert trace.endpoint == srv.base_url.rstrip("/") and trace.reconnects == 0
