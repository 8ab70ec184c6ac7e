"""Limits hold at the server, under 1,000 concurrent sessions.

Every count here is taken at the server, from the simulator's ground truth: each
request's arrival and the end of its last token (engine clock), its prompt tokens and
its ``max_tokens``. Requests in flight at once are the most of those intervals open at
once; requests and tokens per window are sums over arrivals in every sliding window.

The over-HTTP test runs on the wall clock but asserts only counts. The rate tests run
on :func:`~agentflow.embedded.run_virtual` with the in-process :class:`SimTransport`:
arrivals are stamped in loop time at the instant the client sends, so a window's count
is exact, and minutes of traffic take a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from agentflow import (
    ConfigError,
    Fleet,
    FleetResult,
    HTTPTransport,
    Limits,
    Session,
)
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sched import RateGate, Replica, Scheduler, SchedulerState, Ticket
from agentflow.sim import Engine, Profile, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.sim.records import RequestRecord
from agentflow.testing import Reply, ScriptedServer
from agentflow.typing import SessionContext
from tests.sched.conftest import (
    QUICK,
    FakeClock,
    IdleTransport,
    RecordingSim,
    max_in_window,
    peak_overlap,
)
from tests.workers.tools import PLAIN, TOOL, ExactCount

N = 1000
WINDOWS_S = (0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


_: type[SessionContext] = ExactCount  # it is its own per-session context


def workload(n: int = N, *, context: ExactCount | None = None) -> list[Session]:
    """``n`` tiny sessions: half answer at once (1 turn), half call a tool first (2 turns)."""
    agents = [dataclasses.replace(a, context=context) for a in (PLAIN, TOOL)]
    return [agents[i % 2].session(f"question {i}") for i in range(n)]


def run_sim(
    sessions: list[Session], profile: Profile = QUICK, **fleet: Any
) -> tuple[FleetResult, list[RequestRecord]]:
    """Run a fleet on the in-process simulator in virtual time; the server's records."""

    async def main() -> tuple[FleetResult, list[RequestRecord]]:
        engine = Engine(profile, seed=0, textgen=TextGenConfig(tool_rounds=1, answer_tokens=(4, 8)))
        driver = EngineDriver(engine)
        records: list[RequestRecord] = []
        driver.add_finish_hook(records.append)
        transport = SimTransport(driver)
        try:
            result = await Fleet(transport, clock=loop_clock, **fleet).run(sessions)
        finally:
            await transport.aclose()
        return result, records

    result, records = run_virtual(main())
    assert not result.failed, [s.error for s in result.failed][:3]
    assert len(records) == sum(len(s.turns) for s in result.sessions) >= N * 3 // 2
    return result, records


def intervals(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    out = []
    for r in records:
        assert r.finished_s is not None
        out.append((r.arrival_s, r.finished_s))
    return out


async def test_max_concurrency_at_the_server_over_http() -> None:
    """1,000 sessions over real HTTP with max_concurrency=32: the server never has more
    than 32 requests in flight, and does have 32."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, max_concurrency=32).run(workload())
    assert not result.failed
    assert len(sim.records) == sum(len(s.turns) for s in result.sessions) >= 1500
    assert peak_overlap(intervals(sim.records)) == 32
    assert result.peak_in_flight == 32


def test_requests_per_window_at_the_server() -> None:
    """rpm = 3,000 (50/s) with a 1 s burst: in every window of W seconds the server
    receives at most 50 × W + 50 requests — and the 1 s window is full."""
    rate, burst = 50.0, 50.0
    _, records = run_sim(workload(), max_concurrency=N, limits=Limits(rpm=rate * 60, burst_s=1.0))
    arrivals = [r.arrival_s for r in records]
    for w in WINDOWS_S:
        assert max_in_window(arrivals, w) <= rate * w + burst + 1e-6, w
    assert max_in_window(arrivals, 1.0) >= rate * 1.0 + burst - 1
    # All 1,000 were ready at once: a full burst went out at the start (within the
    # prefix warm-up's first token), and no more.
    assert max_in_window(arrivals, 0.01) == burst


def test_tokens_per_window_at_the_server() -> None:
    """tpm = 300,000 (5,000/s, burst 1 s), each request weighted by its prompt + max_tokens.
    With exact prompt counts the weight the client charges is what the server counts:
    in every window the server sees at most 5,000 × W + 5,000 of it."""
    rate, burst = 5000.0, 5000.0
    _, records = run_sim(
        workload(context=ExactCount()),
        max_concurrency=N,
        limits=Limits(tpm=rate * 60, burst_s=1.0),
    )
    arrivals = [r.arrival_s for r in records]
    weights = [float(r.prompt_tokens + r.max_tokens) for r in records]
    used = [float(r.prompt_tokens + r.completion_tokens) for r in records]
    for w in WINDOWS_S:
        assert max_in_window(arrivals, w, weights) <= rate * w + burst + 1e-6, w
        assert max_in_window(arrivals, w, used) <= rate * w + burst + 1e-6, w
    assert max_in_window(arrivals, 1.0, weights) >= 0.95 * (rate + burst)


def test_concurrent_calls_do_not_run_over_tpm() -> None:
    """litellm#18730: concurrent calls ran 6× over TPM (usage was checked, not charged,
    before sending). Here 1,000 sessions are ready at the same instant; each request is
    charged when dispatched, so the server receives one burst's worth at the start and no
    more than the rate after it — counted in the server's own prompt tokens."""
    rate, burst = 2000.0, 4000.0
    _, records = run_sim(
        workload(context=ExactCount()),
        max_concurrency=N,
        limits=Limits(tpm=rate * 60, burst_s=2.0),
    )
    start = min(r.arrival_s for r in records)
    first = [r for r in records if r.arrival_s <= start + 0.01]  # the burst (after warm-up)
    at_start = sum(r.prompt_tokens + r.max_tokens for r in first)
    assert burst * 0.95 <= at_start <= burst + rate * 0.01
    assert len(first) <= N // 10  # while 1,000 sessions were ready
    arrivals = [r.arrival_s for r in records]
    weights = [float(r.prompt_tokens + r.max_tokens) for r in records]
    for w in WINDOWS_S:
        assert max_in_window(arrivals, w, weights) <= rate * w + burst + 1e-6, w


def test_token_debt_keeps_the_long_run_rate() -> None:
    """Prompts estimated at a tenth of their size: each request is under-charged, and the
    server's usage (prompt + completion) is charged as debt before the next dispatch. So
    the tokens the server used up to any time t stay within rate × t + burst, plus at most
    the debt of the requests still in flight (32)."""
    rate, burst = 2000.0, 2000.0
    _, records = run_sim(
        workload(context=ExactCount(lie=lambda n: n // 10)),
        max_concurrency=32,
        limits=Limits(tpm=rate * 60, burst_s=1.0),
    )
    records.sort(key=lambda r: r.arrival_s)
    start = records[0].arrival_s
    biggest = max(r.prompt_tokens + r.completion_tokens for r in records)
    total = 0.0
    for r in records:
        total += r.prompt_tokens + r.completion_tokens
        assert total <= rate * (r.arrival_s - start) + burst + 32 * biggest
    # The debt is what holds the rate: charged at estimates alone, the same run would
    # have sent its ~3× larger real usage in ~1/3 of the time.
    duration = records[-1].arrival_s - start
    assert total / duration <= rate * 1.05


def test_a_streaming_response_keeps_its_slot() -> None:
    """litellm#18116: the RPM/concurrency slot was released when the request was sent,
    not when its response ended. Slow streams (50 ms a token) and a generous rpm: the
    server never has more than 16 requests open, while 1,000 sessions wait."""
    slow = dataclasses.replace(QUICK, name="slow", per_agent_tps=20.0)
    result, records = run_sim(
        workload(), profile=slow, max_concurrency=16, limits=Limits(rpm=60_000.0)
    )
    assert peak_overlap(intervals(records)) == 16
    assert result.peak_in_flight == 16
    # The streams really were slow: each was open for several of its tokens' 50 ms.
    assert min(end - start for start, end in intervals(records)) >= 0.2


async def test_a_streaming_response_keeps_its_slot_over_http() -> None:
    """The same over real HTTP: each response streams 20 frames 5 ms apart; with
    max_concurrency=4 the server never answers more than 4 at once."""
    slow = Reply(frames=Reply.text(" ".join(["w"] * 18)).frames, frame_delay_s=0.005)
    async with ScriptedServer([slow] * 40) as srv, HTTPTransport(srv.base_url) as http:
        fleet = Fleet(http, max_concurrency=4, limits=Limits(rpm=1e6))
        result = await fleet.run(PLAIN.session(f"q{i}") for i in range(40))
    assert not result.failed and len(srv.requests) == 40
    assert srv.peak_in_flight == 4


@pytest.mark.parametrize(
    "bad",
    [{"max_in_flight": 0}, {"rpm": 0}, {"tpm": -1.0}, {"kv_tokens": 0}, {"burst_s": 0}],
)
def test_limits_reject_bad_values(bad: dict[str, float]) -> None:
    (name,) = bad
    with pytest.raises(ConfigError, match=name):
        Limits(**bad)  # type: ignore[arg-type]


def test_no_rates_no_gate() -> None:
    assert Limits(max_in_flight=3).gate() is None


def test_a_bucket_wait_ends_on_a_virtual_clock() -> None:
    """300 requests at 50/s from an awkward start take 5 s of virtual time. (aiolimiter's
    own waker re-arms at "now" forever when the level's float drain leaves a residue of
    a few ulps: a virtual clock never moves on by itself. The watchdog turns such a hang
    into a failure.)"""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        gate = RateGate(rpm=3000.0, tpm=None, burst_s=1.0)
        watchdog = threading.Timer(20.0, loop.call_soon_threadsafe, (loop.stop,))
        watchdog.start()
        try:
            await asyncio.sleep(0.002429)
            for _ in range(300):
                await gate.take(1)
        finally:
            watchdog.cancel()
        return loop.time()

    assert run_virtual(main()) == pytest.approx(0.002429 + (300 - 50) / 50)


async def test_a_kv_budget_belongs_to_a_replica() -> None:
    """kv_tokens is checked per server; given fleet-wide it would be silently ignored."""
    with pytest.raises(ConfigError, match="Replica"):
        Scheduler(
            [Replica(transport=IdleTransport())], limits=Limits(kv_tokens=1), clock=FakeClock()
        )
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        with pytest.raises(ConfigError, match="Replica"):
            await Fleet(http, limits=Limits(kv_tokens=4096)).run([PLAIN.session("x")])
        assert not sim.seen


async def test_the_prompt_estimate_counts_the_tool_schemas() -> None:
    """Servers count tool schemas as prompt tokens; so does the estimate a turn is
    charged with (without a context policy): a tool agent is not under-charged."""
    tickets: list[Ticket] = []

    def fcfs_recording(ticket: Ticket, state: SchedulerState, /) -> float:
        tickets.append(ticket)
        return float(ticket.ready_ns)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, policy=fcfs_recording).run([TOOL.session("q")])
    assert not result.failed and len(tickets) == 2
    schema_chars = len(json.dumps(TOOL.tool_specs, separators=(",", ":")))
    assert all(t.prompt_tokens >= schema_chars // 4 for t in tickets)
    assert all(t.max_output_tokens == 32 for t in tickets)


def test_a_cancelled_take_keeps_the_debt_it_did_not_charge() -> None:
    """The dispatcher cancelled while a request waits for the token bucket (its
    ``aclose``): the server's debt not charged yet is still owed by the next request,
    so the rate holds across the cancellation."""

    async def main() -> tuple[float, float]:
        gate = Limits(tpm=6000.0, burst_s=1.0).gate()  # 100 tokens a second, 100 at once
        assert gate is not None
        await gate.take(100)  # the bucket is full
        gate.settle(reserved=100, used=150)  # and 50 more are owed
        waiting = asyncio.ensure_future(gate.take(10))
        await asyncio.sleep(0.2)  # it waits: 160 do not fit yet
        assert not waiting.done()
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        t0 = asyncio.get_running_loop().time()
        await gate.take(10)  # 50 owed + 10: waits for them to drain
        return t0, asyncio.get_running_loop().time()

    t0, t1 = run_virtual(main())
    # 100 in the bucket, less 0.2 s of drain (20), plus 60: 140 do not fit until 0.4 s
    # more have drained — without the debt, 10 more would fit at once.
    assert t1 - t0 >= 0.39
