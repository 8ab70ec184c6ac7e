"""The driver: the engine's step loop in loop time, real or virtual, and its consumers."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agentflow.embedded._clock import VirtualTimeLoop, run_virtual
from agentflow.sim import Engine, RequestRejected
from agentflow.sim.driver import EngineDriver, parse_chat_body, parse_request_id
from agentflow.transport._decode import TraceBuilder

from ..wait import eventually
from .simhttp import QUICK, STEPPY, TOOLS, Collect, chat_body


def test_virtual_time_deliveries_land_exactly_on_the_step_ends() -> None:
    """In virtual time every delivery happens at origin + token time × time_scale."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        await asyncio.sleep(5.0)  # the driver starts at a non-zero loop time
        async with EngineDriver(Engine(STEPPY, seed=1), time_scale=10.0) as driver:
            sinks = []
            for i in range(8):
                sink = Collect()
                req = driver.submit(chat_body(f"agent {i}", max_tokens=20 + i), sink)
                sinks.append((req, sink))
                await asyncio.sleep(0.013)  # staggered arrivals
            await asyncio.gather(*(s.done for _, s in sinks))
            for req, sink in sinks:
                rec = req.record
                assert rec.finish_reason == "length" and rec.completion_tokens == len(
                    sink.deliveries
                )
                times = [t for t, _, _ in sink.deliveries]
                want = [driver.loop_time_of(t) for t in rec.token_times_s]
                assert times == pytest.approx(want, abs=1e-9)
                assert driver.loop_time_of(rec.arrival_s) == pytest.approx(
                    times[0] - rec.ttft_s * 10.0  # type: ignore[operator]
                )
            stats = driver.stats()
            assert stats.late_steps == 0 and stats.resyncs == 0 and stats.lag_s == 0.0
            assert stats.submitted == 8 and stats.active == 0

    run_virtual(main())


def test_virtual_time_idle_gap_passes_on_the_engine_clock() -> None:
    async def main() -> None:
        async with EngineDriver(Engine(QUICK), time_scale=2.0) as driver:
            a = Collect()
            driver.submit(chat_body("one", max_tokens=3), a)
            await a.done
            steps = driver.stats().steps
            await asyncio.sleep(100.0)  # idle: no steps, no busy loop
            assert driver.stats().steps == steps
            b = Collect()
            req = driver.submit(chat_body("two", max_tokens=3), b)
            assert req.record.arrival_s == pytest.approx(driver.engine_time())
            await b.done
            assert driver.engine.now >= 50.0  # 100 loop seconds / time scale 2

    run_virtual(main())


def test_in_process_consumer_feeds_a_trace_builder() -> None:
    """The payloads are exactly what the client's parser reads off the wire."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        async with EngineDriver(Engine(STEPPY, seed=2)) as driver:
            done = loop.create_future()
            builder = TraceBuilder(endpoint="inproc", sent_ns=loop.clock_ns())

            class Sink:
                def on_payloads(self, payloads: list[bytes], last: bool) -> None:
                    t = loop.clock_ns()  # type: ignore[attr-defined]
                    for p in payloads:
                        builder.feed(p, t)
                    if last:
                        done.set_result(None)

                def on_abort(self, reason: str) -> None:
                    done.set_exception(RuntimeError(reason))

            req = driver.submit(chat_body("tools please", tools=TOOLS), Sink())
            await done
            trace = builder.finish(loop.clock_ns())
            rec = req.record
            assert rec.plan is not None
            assert trace.done and trace.finish_reason == "tool_calls"
            assert trace.response_id == req.id == f"chatcmpl-{req.rid}"
            (call,) = trace.tool_calls
            assert (call.name, call.arguments) == ("read_file", rec.plan.tool_calls[0].arguments)
            assert (
                trace.usage is not None and trace.usage.completion_tokens == rec.completion_tokens
            )
            assert trace.server_timings is not None
            # TTFT and the last chunk on the virtual clock are the ground truth, exactly.
            first_ns = trace.chunk_ns[0] - trace.sent_ns
            assert first_ns / 1e9 == pytest.approx(rec.ttft_s, abs=1e-6)
            assert trace.end_ns / 1e9 == pytest.approx(driver.loop_time_of(rec.token_times_s[-1]))

    run_virtual(main())


async def test_real_time_schedule_follows_the_profile() -> None:
    """On a normal loop, no delivery comes before its scaled step end, and the engine's
    own times follow the profile. (How late deliveries come is the loop's timer jitter plus
    whatever else the machine runs: a figure for ``benchmarks/``, not a check.)"""
    async with EngineDriver(Engine(STEPPY), time_scale=2.0) as driver:
        sink = Collect()
        req = driver.submit(chat_body("real", max_tokens=40), sink)
        await sink.done
        rec = req.record
        late = [
            t - driver.loop_time_of(e)
            for (t, _, _), e in zip(sink.deliveries, rec.token_times_s, strict=True)
        ]
        assert min(late) >= 0
        # 40 steps of at least ~3 ms each, on the engine's clock. (At most: only on an idle
        # machine — a late driver catches up with the real clock, and its engine time with it.)
        assert rec.e2e_s is not None and rec.e2e_s >= 40 * 0.003


async def test_cancel_aborts_in_the_engine_and_stops_deliveries() -> None:
    async with EngineDriver(Engine(QUICK)) as driver:
        sink = Collect()
        req = driver.submit(chat_body("long", max_tokens=2000), sink)
        await eventually(lambda: len(sink.deliveries) >= 3, "three deliveries")
        assert req.cancel() is True
        n = len(sink.deliveries)
        await asyncio.sleep(0.02)
        assert len(sink.deliveries) == n and not sink.done.done()
        assert req.record.finish_reason == "abort"
        assert driver.engine.stats().requests_aborted == 1
        assert driver.stats().cancelled == 1 and driver.active == 0
        assert req.cancel() is False
        kept = driver.record(req.id)  # kept as ground truth, without the plan
        assert kept is not None and kept.plan is None
        assert (kept.finish_reason, kept.token_times_s) == ("abort", req.record.token_times_s)


async def test_stop_aborts_running_requests() -> None:
    driver = EngineDriver(Engine(QUICK))
    sink = Collect()
    driver.submit(chat_body("x", max_tokens=2000), sink)
    await asyncio.sleep(0.01)
    await driver.aclose()
    assert sink.aborted is not None
    with pytest.raises(ConnectionAbortedError):
        await sink.done
    with pytest.raises(RuntimeError, match="closed"):
        driver.start()


async def test_idle_driver_does_not_spin() -> None:
    async with EngineDriver(Engine(QUICK)) as driver:
        sink = Collect()
        driver.submit(chat_body("x", max_tokens=3), sink)
        await sink.done
        steps = driver.stats().steps
        # CPU time of this thread (the loop's), which other processes cannot inflate.
        cpu0 = time.thread_time()
        await asyncio.sleep(0.2)
        assert driver.stats().steps == steps
        assert time.thread_time() - cpu0 < 0.05
        assert driver.running


async def test_records_are_retired_but_kept() -> None:
    async with EngineDriver(Engine(QUICK), keep_records=2) as driver:
        reqs = []
        for i in range(3):
            sink = Collect()
            reqs.append(driver.submit(chat_body(f"r{i}", max_tokens=2), sink))
            await sink.done
        assert driver.record(reqs[0].id) is None  # forgotten (keep_records=2)
        kept = driver.record(reqs[2].rid)
        assert kept is not None and kept.ttft_s == reqs[2].record.ttft_s
        assert driver.record("nonsense") is None


async def test_rejections_are_vllm_shaped() -> None:
    async with EngineDriver(Engine(QUICK)) as driver:
        with pytest.raises(RequestRejected, match="maximum context length is 4096") as ei:
            driver.submit(chat_body("word " * 5000), Collect())
        assert ei.value.status == 400 and ei.value.body()["error"]["type"] == "BadRequestError"
        assert driver.active == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "3"}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "stream_options": {}}, "stream_options"),
        (
            {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
            "tool_choice",
        ),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "nope"}},
            },
            "tool_choice",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "stop": 3}, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ],
)
def test_parse_chat_body_rejects(body: dict[str, object], param: str) -> None:
    with pytest.raises(RequestRejected) as ei:
        parse_chat_body(body)
    assert ei.value.param == param and ei.value.status == 400


def test_parse_chat_body_accepts() -> None:
    p = parse_chat_body(
        chat_body("x", max_tokens=5, max_completion_tokens=7, stop=["a"], seed=3, tools=TOOLS)
    )
    assert (p.max_tokens, p.stop, p.seed, p.stream, p.include_usage) == (7, ["a"], 3, True, True)
    assert parse_request_id("chatcmpl-12") == 12 and parse_request_id("x-1") is None
    assert json.dumps(p.messages)


def test_driver_argument_checks() -> None:
    for kw in (
        {"time_scale": 0},
        {"tokens_per_chunk": 0},
        {"keep_records": -1},
        {"resync_s": -1},
        {"max_batch_s": -1},
    ):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} must be"):
            EngineDriver(Engine(QUICK), **kw)  # type: ignore[arg-type]
