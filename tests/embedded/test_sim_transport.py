"""A fleet on the in-process simulator, in virtual time: real agent loops, exact ground truth."""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, BadRequestError, Fleet, turn_metrics
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.transport import ChatRequest


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def nap(seconds: float) -> str:
    """A tool that takes simulated time."""
    await asyncio.sleep(seconds)
    return "rested"


def driver(profile: str = "deepseek-v4.1-flash-gb300", rounds: int = 3) -> EngineDriver:
    engine = Engine(
        profile, seed=7, textgen=TextGenConfig(tool_rounds=rounds, answer_tokens=(40, 80))
    )
    return EngineDriver(engine)


def test_fleet_runs_its_tool_loops_in_virtual_time() -> None:
    """64 agents × 4 turns with tools complete; minutes of simulated time take seconds of wall."""
    agent = Agent(name="a", model="sim", tools=[lookup, nap], instructions="Shared prefix. " * 200)

    async def main() -> tuple[object, float]:
        transport = SimTransport(driver())
        fleet = Fleet(transport, max_concurrency=32, clock=loop_clock)
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            result = await fleet.run(agent.session(f"task {i}") for i in range(64))
        finally:
            await transport.aclose()
        return result, loop.time() - start

    result, simulated = run_virtual(main())
    sessions = result.sessions  # type: ignore[attr-defined]
    assert all(s.ok for s in sessions), [s.error for s in sessions if not s.ok]
    assert all(len(s.turns) == 4 for s in sessions)
    assert all([m["role"] for m in s.messages].count("tool") >= 3 for s in sessions)
    assert result.peak_in_flight == 32  # type: ignore[attr-defined]
    # Later sessions find the shared system prompt in the simulated prefix cache.
    cached = [s.turns[0].metrics.cached_tokens for s in sessions]
    assert sum(c > 0 for c in cached if c is not None) >= 60
    assert simulated > 0


def test_client_times_equal_the_servers_ground_truth() -> None:
    """On one shared clock, client TTFT and TPOT equal the engine's record (to float rounding)."""

    async def main() -> None:
        drv = driver(rounds=0)
        transport = SimTransport(drv)
        req = ChatRequest(
            model="sim",
            messages=[{"role": "user", "content": "hello " * 300}],
            params={"max_tokens": 64},
        )
        try:
            traces = await asyncio.gather(*(transport.stream(req) for _ in range(16)))
        finally:
            await transport.aclose()
        for trace in traces:
            assert trace.response_id is not None
            record = drv.record(trace.response_id)
            assert record is not None
            m = turn_metrics(trace)
            assert record.ttft_s is not None and record.tpot_s is not None
            assert m.ttft_s == pytest.approx(record.ttft_s * drv.time_scale, abs=1e-6)
            assert m.tpot_s == pytest.approx(record.tpot_s * drv.time_scale, rel=1e-6)
            assert m.output_tokens == record.completion_tokens

    run_virtual(main())


def test_context_overflow_is_a_bad_request() -> None:
    """A prompt over the profile's window is vLLM's 400, as agentflow's BadRequestError."""

    async def main() -> None:
        transport = SimTransport(driver("cpu-tiny"))
        req = ChatRequest(model="sim", messages=[{"role": "user", "content": "word " * 200_000}])
        try:
            with pytest.raises(BadRequestError, match="maximum context length"):
                await transport.stream(req)
        finally:
            await transport.aclose()

    run_virtual(main())


def test_a_sink_that_raises_ends_the_stream_with_its_error() -> None:
    """As the HTTP transports do: the caller's sink raising a plain exception ends
    stream() with it (it waited for ever: only agentflow's own errors were caught)."""

    class Broken:
        def on_delta(self, kind: str, text: str, t_ns: int) -> None:
            raise RuntimeError("sink bug")

    async def main() -> None:
        transport = SimTransport(driver("cpu-tiny"))
        req = ChatRequest(model="sim", messages=[{"role": "user", "content": "hi"}])
        try:
            with pytest.raises(RuntimeError, match="sink bug"):
                await asyncio.wait_for(transport.stream(req, Broken()), 3600)
            assert transport.driver.active == 0  # the request was cancelled in the engine
        finally:
            await transport.aclose()

    run_virtual(main())


def test_models_and_a_closed_simulator() -> None:
    """models() names the driver's served model (as GET /v1/models does); a request
    after aclose() is a ConnectError, not a bare RuntimeError."""
    from agentflow import ConnectError

    async def main() -> None:
        transport = SimTransport(EngineDriver(Engine("cpu-tiny"), model="my-model"))
        assert [m["id"] for m in (await transport.models())["data"]] == ["my-model"]
        await transport.aclose()
        req = ChatRequest(model="my-model", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(ConnectError, match="the simulator was closed"):
            await transport.stream(req)

    run_virtual(main())


def test_a_fleet_on_virtual_time_with_the_wall_clock_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its queue waits would mix the loop's virtual clock and the wall clock (all 0)."""
    agent = Agent(name="a", model="sim", params={"max_tokens": 8})

    async def main(clock: object) -> None:
        transport = SimTransport(driver("cpu-tiny"))
        kw = {} if clock is None else {"clock": clock}
        try:
            await Fleet(transport, **kw).run([agent.session("hi")])  # type: ignore[arg-type]
        finally:
            await transport.aclose()

    with caplog.at_level("WARNING", logger="agentflow.fleet"):
        run_virtual(main(None))
    assert any("fleet.clock_not_virtual" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="agentflow.fleet"):
        run_virtual(main(loop_clock))
    assert not any("clock_not_virtual" in r.getMessage() for r in caplog.records)
