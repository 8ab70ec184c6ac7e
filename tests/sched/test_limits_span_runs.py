"""A fleet's rate limits, token debt and Retry-After holds span its runs.

Each run used to build its buckets and holds afresh: a fleet that ran one batch per
``run`` call sent a whole bucket each time (30 runs of one request under ``rpm=60``
went out in 3 s), the token debt a server's usage reported was forgotten, and a
replica that answered ``Retry-After: 30`` got traffic as soon as the next run started.
Virtual time (:func:`~agentflow.embedded.run_virtual`): every wait is exact; the
servers are real (:class:`~agentflow.testing.ScriptedServer` on loopback) except where
one fleet runs on two loops.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import Agent, Fleet, HTTPTransport, Limits, Replica, TurnTrace
from agentflow._event_bus import EventBus
from agentflow._workers._broker import Broker, WorkerHandle
from agentflow._workers._sharded import ShardedRun
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import MockTransport, Reply, ScriptedServer
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink, Transport
from tests.sched.conftest import IdleTransport, max_in_window

_AGENT = Agent(name="x", model="m", params={"max_tokens": 40})


class _Timed:
    """A transport that notes when (loop time) each request starts."""

    def __init__(self, inner: Transport, starts: list[float]) -> None:
        self.inner = inner
        self.starts = starts

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        self.starts.append(asyncio.get_running_loop().time())
        return await self.inner.stream(request, sink)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("where", ["fleet", "replica"])
def test_back_to_back_runs_stay_within_rate_times_window_plus_burst(where: str) -> None:
    """``rpm=60`` with a burst of 1 s, on the fleet or on its replica: 12 runs of one
    request each, back to back, send at most ``W + 1`` requests in any ``W`` seconds."""

    async def main() -> list[float]:
        starts: list[float] = []
        limits = Limits(rpm=60, burst_s=1.0)
        async with (
            ScriptedServer([Reply.text("ok")] * 12) as srv,
            HTTPTransport(srv.base_url, clock=loop_clock) as http,
        ):
            replica = Replica(
                transport=_Timed(http, starts),
                name="a",
                limits=limits if where == "replica" else Limits(),
            )
            fleet = Fleet(
                [replica],
                limits=limits if where == "fleet" else None,
                clock=loop_clock,
                prefix_warmup=False,
            )
            for k in range(12):
                result = await fleet.run([_AGENT.session(f"q{k}")])
                assert not result.failed, result
        return starts

    starts = run_virtual(main())
    assert len(starts) == 12
    for window in (0.5, 1.0, 2.0, 5.0, 10.0):
        assert max_in_window(starts, window) <= window + 1, (window, starts)


def test_the_token_debt_a_run_leaves_is_paid_by_the_next() -> None:
    """``tpm=6000`` (100 tokens a second); each request is charged ~50 tokens but the
    server reports 5,000 used. Ten requests start at the same times whether they are
    one run of ten sessions or ten runs of one: the debt is paid across runs."""

    def starts_of(runs: int) -> list[float]:
        async def main() -> list[float]:
            starts: list[float] = []
            reply = Reply.text("a b c", prompt_tokens=5000)
            async with (
                ScriptedServer([reply] * 10) as srv,
                HTTPTransport(srv.base_url, clock=loop_clock) as http,
            ):
                fleet = Fleet(
                    _Timed(http, starts),
                    limits=Limits(tpm=6000),
                    max_concurrency=1,
                    clock=loop_clock,
                    prefix_warmup=False,
                )
                per = 10 // runs
                for k in range(runs):
                    await fleet.run([_AGENT.session(f"r{k} q{i}") for i in range(per)])
            return starts

        return run_virtual(main())

    one, ten = starts_of(1), starts_of(10)
    assert len(one) == len(ten) == 10
    # ~49.5 s per request's 5,000 tokens (the first debt is paid with the second request)
    assert ten[-1] - ten[0] > 8 * 49.0, ten
    assert ten == pytest.approx(one, abs=0.5), (one, ten)


def test_a_retry_after_hold_from_one_run_is_honoured_by_the_next() -> None:
    """Replica ``a`` answers run 1's request with 429 ``Retry-After: 30`` (the retry
    goes to ``b``). Run 2, right after, sends nothing to ``a``; run 3, once the 30 s
    are over, does."""

    async def main() -> tuple[int, int, int]:
        async with (
            ScriptedServer([Reply.error(429, headers={"Retry-After": "30"})]) as a_srv,
            ScriptedServer([Reply.text("ok")] * 5) as b_srv,
            HTTPTransport(a_srv.base_url, clock=loop_clock) as a_http,
            HTTPTransport(b_srv.base_url, clock=loop_clock) as b_http,
        ):
            fleet = Fleet(
                [Replica(transport=a_http, name="a"), Replica(transport=b_http, name="b")],
                clock=loop_clock,
                prefix_warmup=False,
            )
            assert not (await fleet.run([_AGENT.session("run 1")])).failed
            after_one = len(a_srv.requests)
            assert not (await fleet.run([_AGENT.session(f"run 2 q{i}") for i in range(4)])).failed
            after_two = len(a_srv.requests)
            await asyncio.sleep(30.0)
            a_srv.add(*[Reply.text("ok")] * 4)
            b_srv.add(*[Reply.text("ok")] * 4)
            assert not (await fleet.run([_AGENT.session(f"run 3 q{i}") for i in range(4)])).failed
            return after_one, after_two, len(a_srv.requests)

    after_one, after_two, after_three = run_virtual(main())
    assert after_one == 1 and after_two == 1, (after_one, after_two)
    assert after_three > 1


def _fleet_on_two_loops(reply: Reply | None = None) -> tuple[Fleet, dict[str, list[float]]]:
    """Two replicas (``a``, ``b``) on in-process transports (a loopback server is bound
    to one loop), noting each request's loop time by replica; ``a`` answers its first
    request with ``reply``."""
    starts: dict[str, list[float]] = {"a": [], "b": []}

    def on(name: str) -> MockTransport:
        def handler(request: ChatRequest) -> Reply:
            starts[name].append(asyncio.get_running_loop().time())
            if name == "a" and reply is not None and len(starts["a"]) == 1:
                return reply
            return Reply.text("ok")

        return MockTransport(handler, clock=loop_clock, endpoint=f"mock://{name}")

    replicas = [Replica(transport=on(n), name=n) for n in "ab"]
    return Fleet(replicas, clock=loop_clock, prefix_warmup=False), starts


def test_a_hold_keeps_the_time_it_had_left_on_a_new_virtual_loop() -> None:
    """Run 1 on one virtual loop gets ``Retry-After: 30`` from ``a`` at 10 s; the runs on
    a new virtual loop (its clock starts at 0 again) avoid ``a`` until about 30 s of
    that loop — not from its start only, and not until 40 s — then use it."""
    fleet, starts = _fleet_on_two_loops(Reply.error(429, headers={"Retry-After": "30"}))

    async def first() -> None:
        await asyncio.sleep(10.0)
        assert not (await fleet.run([_AGENT.session("run 1")])).failed

    async def second() -> tuple[int, int]:
        assert not (await fleet.run([_AGENT.session(f"run 2 q{i}") for i in range(4)])).failed
        await asyncio.sleep(29.0)
        assert not (await fleet.run([_AGENT.session(f"run 3 q{i}") for i in range(4)])).failed
        held = len(starts["a"])
        await asyncio.sleep(1.5)
        assert not (await fleet.run([_AGENT.session(f"run 4 q{i}") for i in range(4)])).failed
        return held, len(starts["a"])

    run_virtual(first())
    assert len(starts["a"]) == 1
    held, after = run_virtual(second())
    assert held == 1 and after > 1, starts


def _one_a_second() -> tuple[Fleet, list[float]]:
    """A fleet on the loop's clock under ``rpm=60`` with a bucket of one, and the loop
    times its requests start at."""
    starts: list[float] = []

    def handler(request: ChatRequest) -> Reply:
        starts.append(asyncio.get_running_loop().time())
        return Reply.text("ok")

    fleet = Fleet(
        MockTransport(handler, clock=loop_clock),
        limits=Limits(rpm=60, burst_s=1.0),
        clock=loop_clock,
        prefix_warmup=False,
    )
    return fleet, starts


def test_a_bucket_gains_nothing_from_a_new_virtual_loop_whose_clock_is_behind() -> None:
    """``rpm=60`` with a bucket of one: run 1's request at 100 s of one virtual loop
    fills it; run 2 on a new loop (at 0 s) waits out that request's second — no more
    (its clock behind the bucket's last reading is no time passed, never a negative
    one that would raise the level by 100 s' worth) and no less (the bucket is the
    fleet's, not the run's)."""
    fleet, starts = _one_a_second()

    async def first() -> None:
        await asyncio.sleep(100.0)
        assert not (await fleet.run([_AGENT.session("run 1")])).failed

    async def second() -> None:
        assert not (await fleet.run([_AGENT.session("run 2")])).failed

    run_virtual(first())
    run_virtual(second())
    assert starts[0] == pytest.approx(100.0, abs=1e-3)
    assert 0.5 < starts[1] <= 1.0 + 1e-3, starts


def test_a_bucket_gains_nothing_from_a_new_virtual_loop_whose_clock_is_ahead() -> None:
    """``rpm=60`` with a bucket of one: run 1's request at 0 s of one virtual loop fills
    it; run 2 on a new loop, 100 s in, still waits that request's second: the new
    loop's clock shares nothing with the last one's, so its 100 s are not time the
    bucket drained for (a leak that only looked at the elapsed time would let run 2 go
    at once)."""
    fleet, starts = _one_a_second()

    async def first() -> None:
        assert not (await fleet.run([_AGENT.session("run 1")])).failed

    async def second() -> None:
        await asyncio.sleep(100.0)
        assert not (await fleet.run([_AGENT.session("run 2")])).failed

    run_virtual(first())
    run_virtual(second())
    assert starts[0] == pytest.approx(0.0, abs=1e-3)
    assert 100.5 < starts[1] <= 101.0 + 1e-3, starts


def test_the_rates_a_fleet_in_workers_leases_span_its_runs() -> None:
    """``Fleet(workers=2)``: each run's parent-side broker (one per run) leases the
    fleet's request bucket (``rpm=60``, a bucket of one), not a new one: three runs
    asking for one request each are granted it a second apart."""
    fleet = Fleet(IdleTransport("r"), limits=Limits(rpm=60, burst_s=1.0), workers=2)
    granted: list[tuple[float, tuple[Any, ...]]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        worker = WorkerHandle(0, [], lambda msg: granted.append((loop.time(), msg)))
        for _ in range(3):
            with fleet._one_run("run"):  # (as ShardedRun builds it, once per run)
                broker = Broker(fleet.limits, [worker], [(0, 1)], fleet._carry)
                await broker._grant_rates(0, 1, 0.0)
                await broker.aclose()

    run_virtual(main())
    assert granted == [(0.0, ("rates", 1, 0.0)), (1.0, ("rates", 1, 0.0)), (2.0, ("rates", 1, 0.0))]


class _Launcher:
    """Workers that are never started: what the parent's broker sends each is noted,
    with the loop time (as a worker process's or Ray actor's launcher would send it)."""

    rerun_lost = False

    def __init__(self, sent: list[tuple[float, tuple[Any, ...]]]) -> None:
        self.sent = sent

    def launch(self, index: int, sessions: list[int]) -> WorkerHandle:
        loop = asyncio.get_running_loop()
        return WorkerHandle(index, sessions, lambda msg: self.sent.append((loop.time(), msg)))


def test_a_sharded_run_leases_the_fleets_rates_across_its_runs() -> None:
    """Through :class:`ShardedRun` (each run builds its own, and its broker): three runs
    of ``Fleet(workers=2)`` under ``rpm=60`` (a bucket of one), a worker asking for one
    request in each, are granted it a second apart — the run hands the broker the
    fleet's buckets, not new ones."""
    fleet = Fleet(IdleTransport("r"), limits=Limits(rpm=60, burst_s=1.0), workers=2)
    sent: list[tuple[float, tuple[Any, ...]]] = []

    async def main() -> None:
        for k in range(3):
            with fleet._one_run("run"):
                sessions = [_AGENT.session(f"r{k} q{i}") for i in range(2)]
                run = ShardedRun(fleet, sessions, EventBus(), _Launcher(sent))  # type: ignore[arg-type]
                run.spawn_workers()
                assert run.broker is not None
                await run.broker._grant_rates(0, 1, 0.0)
                await run.broker.aclose()

    run_virtual(main())
    granted = [(t, msg) for t, msg in sent if msg[0] == "rates"]
    assert granted == [(0.0, ("rates", 1, 0.0)), (1.0, ("rates", 1, 0.0)), (2.0, ("rates", 1, 0.0))]
