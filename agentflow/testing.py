"""Test your agents: in-process with :class:`MockTransport`, or against a scripted, real
HTTP server on loopback with :class:`ScriptedServer`.

:class:`MockTransport` (like ``httpx.MockTransport``) calls your handler with each
:class:`~agentflow.transport.ChatRequest` and decodes the :class:`Reply` it returns through the
same SSE decoder and trace builder as the HTTP transports — real traces, metrics and
events, no sockets. :func:`capture_events` collects a fleet's events for asserting::

    def handler(request: ChatRequest) -> Reply:
        if request.messages[-1]["role"] == "tool":
            return Reply.text("It costs 9.5.")
        return Reply.tool_call("get_price", {"sku": "A-1"})

    events = capture_events()
    result = await Fleet(MockTransport(handler), callbacks=[events]).run([agent.session("…")])

:class:`ScriptedServer` is an OpenAI-compatible ``/v1/chat/completions`` endpoint
that answers each request with the next scripted :class:`Reply`, byte for byte, and
records what it received. Because it is a real server, a test exercises the real
transport — sockets, chunked encoding, SSE framing — not a mock of it::

    async with ScriptedServer([Reply.tool_call("add", {"a": 1, "b": 2}), Reply.text("3")]) as srv:
        result = await agent.run("add 1 and 2", HTTPTransport(srv.base_url))
    srv.assert_complete()

:class:`PostgresServer` is a throwaway PostgreSQL server on loopback, for testing the
store's PostgreSQL backend (``docs/store-postgres.md``).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from aiohttp import ClientConnectionResetError, web
from multidict import CIMultiDict

from agentflow._mock import EventCapture, Handler, MockTransport, capture_events
from agentflow._pgserver import PostgresServer
from agentflow._public import publish as _publish
from agentflow._redact import redact, redact_data
from agentflow._reply import Reply, sse_frames
from agentflow._request import shown_headers

__all__ = [
    "EventCapture",
    "Handler",
    "MockTransport",
    "PostgresServer",
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "capture_events",
    "sse_frames",
]


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received.

    Its ``repr`` masks the values of credential headers (``Authorization``, ``api-key``)
    and every registered secret (:func:`~agentflow.register_secret`) in the body. Not
    hashable (``hash()`` is a ``TypeError`` naming it): its headers and body are mutable
    mappings; requests compare with ``==``.
    """

    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    path: str
    #: Case-insensitive, as HTTP header names are.
    headers: Mapping[str, str]
    body: dict[str, Any]

    def __repr__(self) -> str:
        return (
            f"RecordedRequest(path={redact(self.path)!r}, "
            f"headers={shown_headers(self.headers)!r}, body={redact_data(self.body)!r})"
        )


#: The largest request body :class:`ScriptedServer` takes (bytes; as ``SimServer``'s).
_MAX_BODY = 512 * 1024 * 1024


class ScriptedServer:
    """A loopback HTTP server that answers chat requests from a script.

    It takes request bodies up to 512 MiB (as the simulator's ``SimServer`` does):
    a long conversation is answered from the script and recorded like any other, where
    aiohttp's default limit of 1 MiB (about 260k tokens of context) answered a 413 that
    was never scripted nor recorded.

    Args:
        replies: answered in order, one per request; a request past the end gets a 400
            (not retried) saying the script is exhausted.
        host: the address to bind (loopback).
    """

    def __init__(self, replies: Iterable[Reply] = (), *, host: str = "127.0.0.1") -> None:
        self._replies: deque[Reply] = deque(replies)
        self._host = host
        self._runner: web.AppRunner | None = None
        self.port = 0
        #: Every request received, in order.
        self.requests: list[RecordedRequest] = []
        #: Responses the client abandoned mid-stream (a write found the connection closed).
        self.client_disconnects = 0
        #: Requests being answered now, and the most there ever were at once.
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (an IPv6 host in brackets)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}/v1"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        self._replies.extend(replies)

    def assert_complete(self) -> None:
        """Fail unless every scripted reply was used."""
        if self._replies:
            raise AssertionError(f"{len(self._replies)} scripted replies were never requested")

    async def start(self) -> ScriptedServer:
        """Bind and start serving."""
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._handle)
        # A client that goes away cancels its handler: a stream abandoned mid-delay is
        # counted then, and nothing of it runs on after stop().
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.2, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self.port = _bound_port(site)
        return self

    async def stop(self) -> None:
        """Stop serving and close connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            RecordedRequest(request.path, CIMultiDict(request.headers), json.loads(raw))
        )
        if not self._replies:  # a 400: not retried, so the test fails at once, saying why
            n = len(self.requests)
            return web.json_response(
                {"error": {"message": f"script exhausted: request {n} has no reply",
                           "type": "ScriptExhausted", "code": 400}},
                status=400,
            )  # fmt: skip
        reply = self._replies.popleft()
        if reply.drop:
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=204)
        if reply.status >= 300 and not reply.frame_delay_s:
            return web.Response(
                body=b"".join(reply.frames),
                status=reply.status,
                headers=_headers("application/json", reply.headers),
            )
        resp = web.StreamResponse(
            status=reply.status, headers=_headers("text/event-stream", reply.headers)
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for frame in reply.frames:
                await resp.write(frame)
                if reply.frame_delay_s:
                    await asyncio.sleep(reply.frame_delay_s)
        except (ConnectionError, ClientConnectionResetError):
            self.client_disconnects += 1
            return resp
        except asyncio.CancelledError:  # the client went away (or the server stops)
            self.client_disconnects += 1
            raise
        if reply.cut:
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write_eof()
        return resp


def _bound_port(site: web.TCPSite) -> int:
    server: Any = site._server  # aiohttp keeps the asyncio.Server private
    return int(server.sockets[0].getsockname()[1])


# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())


def _headers(content_type: str, given: Mapping[str, str]) -> CIMultiDict[str]:
    """``given``, with ``content_type`` unless it sets one itself (any case): one
    Content-Type header, never two."""
    headers = CIMultiDict(given)
    headers.setdefault("Content-Type", content_type)
    return headers
