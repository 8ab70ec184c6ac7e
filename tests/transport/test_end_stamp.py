"""A stream that ends without ``[DONE]`` ends when the read that ended its body arrived.

``HTTPTransport`` stamps each read (with the kernel's arrival time where it can), but the
end of a body without ``[DONE]`` — a finish reason, then the chunked body's last chunk —
was taken when the waiting task woke: a callback that held the loop in between (here one
queued by the sink, holding it 50 ms of virtual time) made E2E and the trace's tail that
much longer. On the virtual clock (:func:`~agentflow.embedded.run_virtual`), with a
loopback server in the loop.
"""

from __future__ import annotations

import asyncio

from agentflow import TurnTrace
from agentflow.embedded import VirtualTimeLoop, run_virtual

from .rawserver import TINY_REQUEST, chunk, content, head, make_transport, raw_server


async def _no_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The whole answer in one write: a text, a finish reason, the body's end; no [DONE]."""
    writer.write(head() + chunk(content("ab") + content(None, "stop")) + chunk(b""))
    await writer.drain()
    await reader.read()  # until the client closes


class _Blocking:
    """A sink whose delta queues a callback that holds the loop for 50 ms."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop

    def on_delta(self, kind: str, text: str, t_ns: int) -> None:
        self.loop.call_soon(self.loop._advance, 0.050)


def test_the_end_of_a_body_without_done_is_its_read_not_the_wakeup() -> None:
    async def main() -> TurnTrace:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        async with raw_server(_no_done) as srv:
            t = make_transport("protocol", srv.base_url)
            try:
                trace: TurnTrace = await t.stream(TINY_REQUEST, _Blocking(loop))
                return trace
            finally:
                await t.aclose()

    trace = run_virtual(main)
    assert not trace.done and trace.finish_reason == "stop"
    assert trace.end_ns == trace.chunk_ns[-1]  # one read: the text and the body's end
