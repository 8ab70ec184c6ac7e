"""A 429 or 503 whose body is cut or stalls keeps its status and ``Retry-After``.

Once the status line and headers have arrived, the body is read until it stalls for
``ERROR_BODY_S`` (or the idle limit, when shorter), or the total or first-token limit runs
out; then the status error is raised with what arrived of it.

A body shorter than its ``Content-Length`` followed by a reset, a stalled one, or one
that cannot be decoded used to fail the attempt as a StreamInterrupted, or after the idle
limit (300 s) a StreamTimeout: status and ``Retry-After`` lost, and the failure charged to
the replica.

On the virtual clock (:func:`~agentflow.embedded.run_virtual`): the stalls cost nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import (
    APIStatusError,
    RateLimitError,
    RetryPolicy,
    ServerError,
    Timeouts,
    TransportError,
)
from agentflow.embedded import run_virtual
from agentflow.transport._error_body import ERROR_BODY_S, error_body_s

from .rawserver import TINY_REQUEST, make_transport, raw_server

KINDS = ["protocol", "aiohttp", "openai"]

STALLED_429 = b"HTTP/1.1 429 X\r\nRetry-After: 2\r\nContent-Length: 100\r\n\r\nabcde"
STALLED_503 = (
    b"HTTP/1.1 503 X\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n"
)
CUT_429 = b"HTTP/1.1 429 X\r\nRetry-After: 2\r\nContent-Length: 100000\r\n\r\nabcde"
GARBLED_503 = (
    b"HTTP/1.1 503 X\r\nRetry-After: 2\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n\r\nabcde"
)


async def _outcome(
    kind: str, payload: bytes, *, then: str, timeouts: Timeouts | None = None
) -> tuple[APIStatusError, float]:
    """The error of one request answered with ``payload``, then a stall or a reset; and
    the (virtual) seconds it took."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        if then == "reset":
            await asyncio.sleep(0.05)
            writer.transport.abort()
        else:
            await asyncio.sleep(10**7)

    loop = asyncio.get_running_loop()
    async with raw_server(answer) as srv:
        t = make_transport(kind, srv.base_url, timeouts=timeouts or Timeouts())
        start = loop.time()
        try:
            with pytest.raises(TransportError) as caught:
                await t.stream(TINY_REQUEST)
        finally:
            await t.aclose()
        err = caught.value
        assert isinstance(err, APIStatusError), repr(err)
        return err, loop.time() - start


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("payload", "error"),
    [(STALLED_429, RateLimitError), (STALLED_503, ServerError)],
    ids=["429-short-content-length", "503-unended-chunks"],
)
def test_a_stalled_error_body_keeps_its_status(
    kind: str, payload: bytes, error: type[TransportError]
) -> None:
    err, took = run_virtual(_outcome(kind, payload, then="stall"))
    assert type(err) is error, err
    assert err.retry_after == 2.0 and "abcde" in str(err)
    # Given up on the body after ERROR_BODY_S, long before the idle limit (300 s).
    assert took == pytest.approx(ERROR_BODY_S, abs=0.5)
    if error is RateLimitError:  # the replica working as designed
        assert not RetryPolicy.blames_replica(err)


@pytest.mark.parametrize("kind", KINDS)
def test_a_shorter_idle_limit_bounds_the_error_body(kind: str) -> None:
    err, took = run_virtual(_outcome(kind, STALLED_429, then="stall", timeouts=Timeouts(idle=3)))
    assert isinstance(err, RateLimitError) and err.retry_after == 2.0
    assert took == pytest.approx(3.0, abs=0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_body_cut_by_a_reset_keeps_its_status(kind: str) -> None:
    err, _ = run_virtual(_outcome(kind, CUT_429, then="reset"))
    assert isinstance(err, RateLimitError) and err.retry_after == 2.0
    assert not RetryPolicy.blames_replica(err)


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_body_that_cannot_be_decoded_keeps_its_status(kind: str) -> None:
    err, _ = run_virtual(_outcome(kind, GARBLED_503, then="reset"))
    assert isinstance(err, ServerError) and err.status == 503 and err.retry_after == 2.0


def test_error_body_s() -> None:
    assert error_body_s(Timeouts()) == ERROR_BODY_S
    assert error_body_s(Timeouts(idle=None)) == ERROR_BODY_S
    assert error_body_s(Timeouts(idle=2.5)) == 2.5
    assert error_body_s(None) == ERROR_BODY_S


def test_the_openai_hook_is_added_once_and_idle_outside_a_transport() -> None:
    """Two transports on one client add one hook; a request the client sends by itself
    (not through a transport) is left as the SDK reads it."""
    import openai

    from agentflow.transport import OpenAITransport
    from agentflow.transport._openai_body import ErrorHead, _on_response, hook_error_bodies

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    OpenAITransport(client)
    for _ in range(2):
        hook_error_bodies(client)
    hooks = client._client.event_hooks["response"]
    assert hooks.count(_on_response) == 1

    class Answer:  # what the hook reads of a response
        status_code = 429
        headers = None
        stream = object()

    answer = Answer()
    asyncio.run(_on_response(answer))  # type: ignore[arg-type]
    assert answer.stream is Answer.stream  # outside a transport's request: untouched
    assert ErrorHead(1.0).body() == b""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "timeouts", [Timeouts(total=1.0), Timeouts(first_token=1.0)], ids=["total", "first_token"]
)
def test_the_total_and_first_token_limits_still_bound_an_error_body(
    kind: str, timeouts: Timeouts
) -> None:
    """They ran out of force once the head came: a stalled 503 took ERROR_BODY_S (10 s)
    with total=1 on HTTPTransport and AiohttpTransport. It ends at the limit, with its
    status and what came of its body (not a StreamTimeout)."""
    err, took = run_virtual(_outcome(kind, STALLED_503, then="stall", timeouts=timeouts))
    assert isinstance(err, ServerError) and err.retry_after == 2.0 and "abcde" in str(err)
    assert took == pytest.approx(1.0, abs=0.2)
