"""``[DONE]`` ends the exchange: what the body does after it cannot undo a complete answer.

A server that sent ``[DONE]`` but never ended its chunked body made every transport wait
for the end until the idle limit, then raise :class:`StreamTimeout`; one that reset the
connection right after made it a :class:`StreamInterrupted` — and both were retried, the
answer generated again. The OpenAI SDK itself stops at ``[DONE]``. Now the answer is
returned; the rest of the body is drained briefly (``DRAIN_AFTER_DONE_S``) for the
connection's sake, which is reused only when the body did end.

On the virtual clock (:func:`~agentflow.embedded.run_virtual`): the server's hour-long
pause costs nothing, and the idle limit would run out on the old code within it.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Timeouts, TurnTrace
from agentflow.embedded import run_virtual

from .rawserver import (
    KINDS,
    TINY_REQUEST,
    chunk,
    content,
    head,
    keepalive_server,
    make_transport,
    raw_server,
)

#: A whole answer, "ab", up to and including [DONE] (the body's last chunk not sent).
ANSWER = content("a") + content("b") + content(None, "stop") + b"data: [DONE]\n\n"


async def _twice(
    kind: str, answer: object, timeouts: Timeouts | None = None
) -> tuple[list[object], int]:
    """Stream twice on one transport; the outcomes (trace or error) and the connections
    the server saw."""
    outcomes: list[object] = []
    async with raw_server(answer) as srv:  # type: ignore[arg-type]
        t = make_transport(kind, srv.base_url, timeouts=timeouts or Timeouts(idle=5.0))
        try:
            for _ in range(2):
                try:
                    outcomes.append(await t.stream(TINY_REQUEST))
                except Exception as exc:
                    outcomes.append(exc)
        finally:
            await t.aclose()
        return outcomes, srv.connections


async def _left_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The answer up to [DONE], then a chunked body that never ends."""
    writer.write(head() + chunk(ANSWER))
    await writer.drain()
    await asyncio.sleep(3600.0)


def _complete(outcome: object) -> None:
    assert isinstance(outcome, TurnTrace), outcome
    assert outcome.content == "ab" and outcome.done and outcome.finish_reason == "stop"


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_left_open_after_done_returns_the_answer(kind: str) -> None:
    """[DONE], then the chunked body never ends: the answer, not an idle StreamTimeout;
    the connection (its body unfinished) is not reused."""
    outcomes, connections = run_virtual(_twice(kind, _left_open))
    for outcome in outcomes:
        _complete(outcome)
    assert connections == 2


@pytest.mark.parametrize("kind", KINDS)
def test_no_limit_runs_out_after_done(kind: str) -> None:
    """An idle and a total limit shorter than the drain after [DONE]: neither cuts it."""
    for timeouts in (Timeouts(idle=0.01), Timeouts(total=0.01)):
        outcomes, _ = run_virtual(_twice(kind, _left_open, timeouts))
        for outcome in outcomes:
            _complete(outcome)


@pytest.mark.parametrize("kind", KINDS)
def test_a_reset_after_done_returns_the_answer(kind: str) -> None:
    """[DONE], then the connection is reset: the answer, not a StreamInterrupted."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head() + chunk(ANSWER))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    outcomes, connections = run_virtual(_twice(kind, answer))
    for outcome in outcomes:
        _complete(outcome)
    assert connections == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_that_ends_just_after_done_keeps_its_connection(kind: str) -> None:
    """The body's last chunk a moment after [DONE] (a server's separate write): it is
    waited for, and the connection is reused."""

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(head() + chunk(ANSWER))
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(chunk(b""))
        return True

    async def main() -> tuple[list[TurnTrace], int]:
        async with keepalive_server(answer) as srv:
            t = make_transport(kind, srv.base_url, timeouts=Timeouts(idle=5.0))
            try:
                traces = [await t.stream(TINY_REQUEST) for _ in range(2)]
            finally:
                await t.aclose()
            return traces, srv.connections

    traces, connections = run_virtual(main())
    for trace in traces:
        _complete(trace)
    assert connections == 1


#: What a server may send after [DONE] in the same read: an event over the transports'
#: max_event_bytes (1024 here), another content event, HTTP framing that is not HTTP.
AFTER_DONE = {
    "over-long event": chunk(b"data: " + b"x" * 4000 + b"\n\n") + chunk(b""),
    "content event": chunk(content("LATE")) + chunk(b""),
    "bad chunk size": b"zz-not-a-chunk-size\r\n\r\n",
}


@pytest.mark.parametrize("after", list(AFTER_DONE))
@pytest.mark.parametrize("kind", KINDS)
def test_what_follows_done_in_its_own_read_is_not_the_answers(kind: str, after: str) -> None:
    """[DONE] and more in one read: the answer is what came before [DONE], as when the
    rest comes in a later read. It was decoded: a later event added to the answer, an
    over-long one (or, over HTTPTransport, bad framing) turned it into a
    StreamProtocolError — the same bytes gave another result by how TCP split them."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(chunk(ANSWER) + AFTER_DONE[after])
        await writer.drain()
        await asyncio.sleep(3600.0)

    async def main() -> object:
        async with raw_server(answer) as srv:
            t = make_transport(
                kind, srv.base_url, timeouts=Timeouts(idle=5.0), max_event_bytes=1024
            )
            try:
                return await t.stream(TINY_REQUEST)
            except Exception as exc:
                return exc
            finally:
                await t.aclose()

    _complete(run_virtual(main()))
