"""Fault injection: every fault kind as agentflow's transport sees it; seeded rates."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from agentflow import (
    BadRequestError,
    HTTPTransport,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
    Timeouts,
)
from agentflow.sim import TextGenConfig
from agentflow.sim.faults import (
    FAULT_KINDS,
    Fault,
    FaultConfig,
    FaultInjector,
    parse_fault_header,
)
from agentflow.sim.server import SimServer
from agentflow.transport import ChatRequest

from ..wait import eventually
from .simhttp import QUICK, user


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(QUICK) as server:
        yield server


def req(fault: str | None = None, text: str = "fault me", max_tokens: int = 40) -> ChatRequest:
    headers = {"X-Agentflow-Fault": fault} if fault else {}
    return ChatRequest(
        model="m", messages=user(text), params={"max_tokens": max_tokens}, headers=headers
    )


async def wait_aborted(sim: SimServer, rid: int) -> None:
    def aborted() -> bool:
        rec = sim.driver.record(rid)
        return rec is not None and rec.finish_reason == "abort" and sim.driver.active == 0

    await eventually(aborted, f"request {rid} to be aborted")


async def test_rate_limit_with_retry_after(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(RateLimitError) as ei:
            await t.stream(req("rate_limit; retry_after=2.5"))
    # Sent as whole seconds (HTTP's delta-seconds): a fraction rounds up.
    assert ei.value.status == 429 and ei.value.retry_after == 3
    assert ei.value.body["error"]["type"] == "RateLimitError"
    assert sim.driver.stats().submitted == 0  # never reached the engine


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [
        ("0", "0"),
        ("0.5", "1"),
        ("2", "2"),
        ("2.01", "3"),
        ("1234567", "1234567"),
        ("1e7", "10000000"),
    ],
)
async def test_retry_after_is_sent_as_whole_seconds(
    sim: SimServer, retry_after: str, header: str
) -> None:
    """HTTP's delta-seconds are digits only: a fraction rounds up, and a large value is
    written out (``:g`` sent 1234567 as "1.23457e+06": another value, and not valid)."""
    for kind, status in (("rate_limit", 429), ("unavailable", 503)):
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                f"{sim.base_url}/chat/completions",
                json={"messages": user("x"), "max_tokens": 3},
                headers={"X-Agentflow-Fault": f"{kind}; retry_after={retry_after}"},
            ) as r,
        ):
            assert (r.status, r.headers["Retry-After"]) == (status, header)


@pytest.mark.parametrize(("kind", "status"), [("server_error", 500), ("unavailable", 503)])
async def test_server_errors(sim: SimServer, kind: str, status: int) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(ServerError) as ei:
            await t.stream(req(kind))
    assert ei.value.status == status and ei.value.body["error"]["code"] == status
    assert (ei.value.retry_after is not None) == (status == 503)


async def test_reset_mid_stream(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(StreamInterrupted) as ei:
            await t.stream(req("reset_mid_stream; after=3"))
    trace = ei.value.trace
    assert trace is not None and len(trace.chunk_ns) == 3 and not trace.done
    await wait_aborted(sim, 0)


async def test_stall_mid_stream_trips_the_idle_timeout() -> None:
    long = TextGenConfig(answer_tokens=(3000, 3000))
    async with SimServer(QUICK, textgen=long) as sim:
        async with HTTPTransport(sim.base_url, timeouts=Timeouts(idle=0.2)) as t:
            with pytest.raises(StreamTimeout) as ei:
                await t.stream(req("stall_mid_stream; after=2; seconds=10", max_tokens=3000))
        assert ei.value.phase == "idle" and ei.value.timeout_s == 0.2
        await wait_aborted(sim, 0)  # the client gave up: the engine stops working for it


async def test_short_stall_then_the_rest(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        trace = await t.stream(req("stall_mid_stream; after=5; seconds=0.3", max_tokens=30))
    assert trace.done and trace.finish_reason == "length" and len(trace.chunk_ns) == 30
    gaps = [b - a for a, b in zip(trace.chunk_ns, trace.chunk_ns[1:], strict=False)]
    # The server holds the 6th token back ≥ 0.3 s after writing the 5th; reads are stamped
    # as they reach the socket (kernel stamps), so the client sees at least that gap there.
    # (Other gaps are whatever the machine's load makes them: not checked.)
    assert gaps[4] >= 0.28e9


async def test_malformed_chunk(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(StreamProtocolError, match="malformed chunk") as ei:
            await t.stream(req("malformed_chunk; after=4"))
    assert ei.value.payload is not None and ei.value.payload.startswith(b'{"id":')
    assert ei.value.trace is not None and len(ei.value.trace.chunk_ns) == 4
    await wait_aborted(sim, 0)


async def test_cut_stream(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(StreamProtocolError, match="neither a finish_reason nor") as ei:
            await t.stream(req("cut_stream; after=6"))
    trace = ei.value.trace
    assert trace is not None and len(trace.chunk_ns) == 6
    assert not trace.done and trace.finish_reason is None
    await wait_aborted(sim, 0)
    # The connection ended cleanly: the next request on the pool works.
    async with HTTPTransport(sim.base_url) as t:
        assert (await t.stream(req())).done


async def test_seeded_mid_stream_faults_fall_mid_stream() -> None:
    cfg = FaultConfig(cut_stream=1.0, seed=4)
    async with SimServer(QUICK, faults=cfg) as sim, HTTPTransport(sim.base_url) as t:
        seen = []
        for i in range(6):
            with pytest.raises(StreamProtocolError) as ei:
                await t.stream(req(text=f"cut {i}", max_tokens=20))
            assert ei.value.trace is not None
            seen.append(len(ei.value.trace.chunk_ns))
    assert all(1 <= n <= 19 for n in seen) and len(set(seen)) > 1


async def test_bad_fault_header(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        with pytest.raises(BadRequestError, match="unknown fault 'explode'"):
            await t.stream(req("explode"))
        assert (await t.stream(req("none"))).done


async def test_non_stream_faults(sim: SimServer) -> None:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as c:
        with pytest.raises(openai.RateLimitError):
            await c.chat.completions.create(
                model="m",
                messages=user("x"),  # type: ignore[arg-type]
                extra_headers={"X-Agentflow-Fault": "rate_limit"},
            )
        with pytest.raises(openai.APIConnectionError):
            await c.chat.completions.create(
                model="m",
                messages=user("x"),  # type: ignore[arg-type]
                max_tokens=3,
                extra_headers={"X-Agentflow-Fault": "reset_mid_stream"},
            )
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{sim.base_url}/chat/completions",
            json={"messages": user("x"), "max_tokens": 3},
            headers={"X-Agentflow-Fault": "malformed_chunk"},
        ) as r,
    ):
        assert r.status == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(await r.read())


async def test_honour_header_off() -> None:
    async with (
        SimServer(QUICK, faults=FaultConfig(honour_header=False)) as sim,
        HTTPTransport(sim.base_url) as t,
    ):
        assert (await t.stream(req("rate_limit"))).done


def test_seeded_draws_are_deterministic_and_retries_draw_again() -> None:
    cfg = FaultConfig(rate_limit=0.3, reset_mid_stream=0.2, seed=11)
    bodies = [f'{{"n": {i}}}'.encode() for i in range(400)]

    def draws(order: list[bytes]) -> dict[bytes, list[str | None]]:
        inj = FaultInjector(cfg)
        out: dict[bytes, list[str | None]] = {}
        for b in order:
            f = inj.decide(b)
            out.setdefault(b, []).append(None if f is None else f.kind)
        return out

    once = draws(bodies + bodies)
    again = draws(list(reversed(bodies)) + bodies)  # another arrival order
    assert once == again
    kinds = Counter(k for ks in once.values() for k in ks)
    assert 0.22 < kinds["rate_limit"] / 800 < 0.38 and 0.14 < kinds["reset_mid_stream"] / 800 < 0.26
    # The same body's second draw is a new one.
    assert any(a != b for a, b in once.values())
    other = FaultInjector(FaultConfig(rate_limit=0.3, reset_mid_stream=0.2, seed=12))
    assert [other.decide(b) is None for b in bodies] != [once[b][0] is None for b in bodies]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rate_limit": 1.5}, r"rate_limit must be a rate in \[0, 1\]"),
        ({"cut_stream": -0.1}, "cut_stream"),
        ({"rate_limit": 0.6, "server_error": 0.6}, "add up to 1.2"),
        ({"stall_s": 0}, "stall_s must be > 0"),
        ({"retry_after_s": -1}, "retry_after_s"),
    ],
)
def test_fault_config_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FaultConfig(**kwargs)  # type: ignore[arg-type]


def test_fault_header_parsing() -> None:
    f = parse_fault_header("Stall-Mid-Stream; after=3; seconds=0.5")
    assert f == Fault(kind="stall_mid_stream", after=3, stall_s=0.5, forced=True)
    assert parse_fault_header("none") is None
    assert parse_fault_header("rate_limit; retry_after=7").retry_after_s == 7  # type: ignore[union-attr]
    for bad in (
        "reset; after=1",
        "cut_stream; after=-1",
        "cut_stream; colour=red",
        "cut_stream; after",
        "rate_limit; retry_after=inf",  # not a number a Retry-After header can carry
        "rate_limit; retry_after=nan",
    ):
        with pytest.raises(ValueError, match="X-Agentflow-Fault"):
            parse_fault_header(bad)
    assert set(FAULT_KINDS) == {
        "rate_limit",
        "server_error",
        "unavailable",
        "reset_mid_stream",
        "stall_mid_stream",
        "malformed_chunk",
        "cut_stream",
    }
    # A seeded mid-stream fault always leaves output before and after it.
    for pos in (0.0, 0.5, 0.999):
        assert 1 <= Fault(kind="cut_stream", position=pos).after_tokens(10) <= 9
    assert Fault(kind="cut_stream", position=0.7).after_tokens(1) == 1


async def test_a_fault_counts_only_once_applied(sim: SimServer) -> None:
    """A request the engine refuses (400) injects no fault, so counts none: it was counted
    in /agentflow/stats and agentflow_sim:faults_injected_total before the 400."""
    too_long = {"messages": user("word " * 5000), "max_tokens": 3}
    async with aiohttp.ClientSession() as s:
        for fault in ("reset_mid_stream", "cut_stream; after=1", "malformed_chunk"):
            for stream in (True, False):
                async with s.post(
                    f"{sim.base_url}/chat/completions",
                    json={**too_long, "stream": stream},
                    headers={"X-Agentflow-Fault": fault},
                ) as r:
                    assert r.status == 400
        assert set(sim.faults.counts.values()) == {0}
        async with s.get(f"{sim.url}/metrics") as r:
            assert "faults_injected_total" not in await r.text()
        # Applied faults count: a 429 sent, a stream struck.
        for fault in ("rate_limit", "cut_stream; after=1"):
            async with s.post(
                f"{sim.base_url}/chat/completions",
                json={"messages": user("x"), "max_tokens": 3, "stream": True},
                headers={"X-Agentflow-Fault": fault},
            ) as r:
                await r.read()
        async with s.get(f"{sim.url}/agentflow/stats") as r:
            counted = (await r.json())["faults"]
    assert {k: n for k, n in counted.items() if n} == {"rate_limit": 1, "cut_stream": 1}
    assert sim.metrics.faults == {"rate_limit": 1, "cut_stream": 1}
