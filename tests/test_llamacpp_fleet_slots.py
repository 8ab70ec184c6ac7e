"""A Fleet warns by itself when a run can have more requests in flight on a llama.cpp
server than it has slots: at the start of a run it asks each HTTP endpoint's ``/props``
(once per process, in the background), and logs the warning once per endpoint.

Against a loopback server that answers ``/props`` as llama.cpp does, one whose ``/props``
never answers (the run does not wait for it), the simulator (no ``/props``: no warning),
and — marked ``llamacpp`` — the real llama.cpp server with its 4 slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

import pytest
from aiohttp import web

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Limits, Replica
from agentflow import llamacpp as lc
from agentflow.llamacpp import LlamaCppServer
from agentflow.sim import TextGenConfig
from agentflow.sim.server import SimServer
from agentflow.testing import Reply

AGENT = Agent(name="a", model="m", params={"max_tokens": 1})


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """Each test starts with no endpoint asked (the memory is per process)."""
    lc._probed.clear()
    lc._warned.clear()
    yield
    lc._probed.clear()
    lc._warned.clear()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentflow.llamacpp" and r.levelno == logging.WARNING
    ]


class FakeLlama:
    """Chat answers (one scripted reply each) and a ``/props`` with ``total_slots``, or a
    ``/props`` that never answers (``hang``)."""

    def __init__(self, slots: int, *, hang: bool = False) -> None:
        self.slots = slots
        self.hang = hang
        self.props_asked = 0
        self.chats = 0
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def props(self, _: web.Request) -> web.Response:
        self.props_asked += 1
        if self.hang:
            await asyncio.sleep(3600)
        return web.json_response({"total_slots": self.slots})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.chats += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in Reply.text("ok").frames:
            await resp.write(frame)
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/props", self.props)
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def run(transport: Any, sessions: int, **fleet: Any) -> None:
    result = await Fleet(transport, **fleet).run(AGENT.session(f"hi {i}") for i in range(sessions))
    assert not result.failed, [s.error for s in result.failed]


async def test_a_run_over_the_slots_warns_once_with_what_it_can_have_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with FakeLlama(slots=2) as srv, HTTPTransport(srv.base_url) as t:
        await run(t, 6, max_concurrency=4)
        # The fleet's concurrency, 4, is what the run can have in flight (6 sessions).
        (first,) = warnings_of(caplog)
        assert "slots=2" in first and "concurrency=4" in first and srv.base_url in first
        await run(t, 6, max_concurrency=4)  # once per endpoint: asked once, said once
        assert len(warnings_of(caplog)) == 1 and srv.props_asked == 1
        assert srv.chats == 12


async def test_probe_slots_false_never_asks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with FakeLlama(slots=2) as srv, HTTPTransport(srv.base_url) as t:
        await run(t, 6, max_concurrency=4, probe_slots=False)
        assert srv.chats == 6 and srv.props_asked == 0
    assert warnings_of(caplog) == [] and lc._probed == {}


def test_probe_slots_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="probe_slots must be True or False, got 'no'"):
        Fleet(HTTPTransport("http://127.0.0.1:9/v1"), probe_slots="no")  # type: ignore[arg-type]


async def test_sessions_and_replica_caps_bound_what_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with FakeLlama(slots=2) as srv, HTTPTransport(srv.base_url) as t:
        await run(t, 2, max_concurrency=64)  # 2 sessions never exceed 2 slots
        assert warnings_of(caplog) == [] and srv.props_asked == 1
    lc._probed.clear()
    async with FakeLlama(slots=2) as srv, HTTPTransport(srv.base_url) as t:
        await run(Replica(transport=t, limits=Limits(max_in_flight=3)), 8, max_concurrency=64)
        (warning,) = warnings_of(caplog)
        assert "concurrency=3" in warning  # the replica's own cap


async def test_replicas_on_one_endpoint_add_up(caplog: pytest.LogCaptureFixture) -> None:
    """Two replicas capped at 3 on one 4-slot server can have 6 in flight there: warned with
    6 (the larger cap, 3, was taken, and no warning came)."""
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with FakeLlama(slots=4) as srv:
        async with HTTPTransport(srv.base_url) as a, HTTPTransport(srv.base_url) as b:
            replicas = [
                Replica(transport=t, name=n, limits=Limits(max_in_flight=3))
                for n, t in (("a", a), ("b", b))
            ]
            await run(replicas, 8, max_concurrency=64)
        (warning,) = warnings_of(caplog)
        assert "slots=4" in warning and "concurrency=6" in warning
        lc._probed.clear()
        async with HTTPTransport(srv.base_url) as a, HTTPTransport(srv.base_url) as b:
            capped = Replica(transport=a, name="a", limits=Limits(max_in_flight=3))
            free = Replica(transport=b, name="b")  # uncapped: counts as max_concurrency
            bound = lc.fleet_endpoints([capped, free], max_concurrency=10, sessions=100)
            assert {k: v[1] for k, v in bound.items()} == {srv.base_url: 10}
            bound = lc.fleet_endpoints([capped, free], max_concurrency=10, sessions=5)
            assert {k: v[1] for k, v in bound.items()} == {srv.base_url: 5}
            other = Replica(transport=b, name="b", limits=Limits(max_in_flight=2))
            bound = lc.fleet_endpoints([capped, other], max_concurrency=10, sessions=100)
            assert {k: v[1] for k, v in bound.items()} == {srv.base_url: 5}


async def test_a_props_that_never_answers_does_not_hold_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The probe runs beside the run: the run ends while ``/props`` still hangs, the probe
    is dropped with it, and nothing is logged or remembered."""
    caplog.set_level(logging.DEBUG, logger="agentflow")
    async with FakeLlama(slots=1, hang=True) as srv, HTTPTransport(srv.base_url) as t:
        await run(t, 3, max_concurrency=3)
        assert srv.chats == 3 and srv.props_asked == 1
    assert warnings_of(caplog) == []
    assert lc._probed == {}  # cancelled before it learnt anything: a later run asks again


async def test_the_simulator_has_no_slots_and_gets_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The simulator answers /props with a 404, as vLLM does: no warning, and the
    endpoint is remembered as having no slots to respect (not asked again)."""
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with (
        SimServer("cpu-tiny", textgen=TextGenConfig(tool_rounds=0), time_scale=0.01) as sim,
        HTTPTransport(sim.base_url) as t,
    ):
        fleet = Fleet(t, max_concurrency=32)
        probe = fleet._probe_slots(32)  # what a run starts with
        assert probe is not None
        assert await probe == []
        await run(t, 8, max_concurrency=32)
    assert warnings_of(caplog) == []
    assert lc._probed == {sim.base_url.rstrip("/"): None}


async def test_in_process_transports_are_not_asked() -> None:
    from agentflow.testing import MockTransport

    fleet = Fleet(MockTransport.scripted([Reply.text("ok")]), max_concurrency=64)
    assert fleet._probe_slots(64) is None


@pytest.mark.llamacpp
async def test_the_real_llamacpp_server_warns_a_fleet_over_its_slots(
    llamacpp: LlamaCppServer, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp with 4 slots: 5 sessions at max_concurrency 8 can have 5 in flight — one
    warning; a fleet of 4 at most is not warned."""
    caplog.set_level(logging.WARNING, logger="agentflow")
    async with HTTPTransport(llamacpp.base_url) as t:
        agent = Agent(name="a", model="smollm2", params={"max_tokens": 1})
        result = await Fleet(t, max_concurrency=4).run(agent.session("hi") for _ in range(4))
        assert not result.failed
        assert warnings_of(caplog) == []
        assert lc._probed == {llamacpp.base_url: 4}
        result = await Fleet(t, max_concurrency=8).run(agent.session("hi") for _ in range(5))
        assert not result.failed
    (warning,) = warnings_of(caplog)
    assert "slots=4" in warning and "concurrency=5" in warning


@contextlib.asynccontextmanager
async def _props_server(answer: bytes) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A raw server that writes ``answer`` to every request and keeps the connection open
    (until the test ends)."""
    heads: list[bytes] = []
    handlers: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(answer)
            await writer.drain()
            await asyncio.sleep(3600)  # never closes on its own
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", heads
    finally:
        server.close()
        for t in handlers:
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
        b'{"total_slots":3}',
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'9\r\n{"total_s\r\n8\r\nlots":3}\r\n0\r\n\r\n',
    ],
    ids=["content-length", "chunked"],
)
async def test_the_answer_is_read_to_its_end_not_to_the_connections(answer: bytes) -> None:
    """A server that keeps the connection open after answering: the slots are read when the
    answer ends (not at the time limit), and the endpoint's headers were sent."""
    async with _props_server(answer) as (url, heads):
        slots = await lc.server_slots(url, headers={"api-key": "k-123456"}, timeout_s=60.0)
    assert slots == 3
    (head,) = heads
    assert head.startswith(b"GET /props HTTP/1.1\r\n") and b"\r\napi-key: k-123456\r\n" in head
