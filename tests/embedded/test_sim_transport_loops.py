"""One simulator driver across event loops: after a loop ends it starts again on the next
(its engine clock anchored anew, so client times still equal ground truth); used from a
second loop while the first still runs, it says so as a ConfigError; a step loop that
failed is a ConnectError naming the failure, not a bare RuntimeError."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentflow import ConfigError, ConnectError, TransportError, turn_metrics
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.transport import ChatRequest
from tests.wait import GUARD_S

REQUEST = ChatRequest(
    model="m", messages=[{"role": "user", "content": "hi " * 50}], params={"max_tokens": 8}
)


def test_a_driver_starts_again_on_the_next_loop_with_its_clock_anchored_anew() -> None:
    driver = EngineDriver(Engine("cpu-tiny", seed=1))
    transport = SimTransport(driver, clock=loop_clock)

    async def one() -> tuple[Any, Any]:
        trace = await transport.stream(REQUEST)
        assert trace.response_id is not None
        return trace, driver.record(trace.response_id)

    (t1, r1), (t2, r2) = run_virtual(one()), run_virtual(one())
    assert t1.finish_reason == t2.finish_reason == "length"
    assert r1.finished_s is not None and r2.arrival_s >= r1.finished_s  # one engine clock
    for trace, record in ((t1, r1), (t2, r2)):
        assert turn_metrics(trace).ttft_s == pytest.approx(record.ttft_s, abs=1e-6)
    run_virtual(transport.aclose())


def test_a_driver_running_on_another_loop_is_a_config_error() -> None:
    driver = EngineDriver(Engine("cpu-tiny", seed=1))
    transport = SimTransport(driver)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:

        async def begin() -> None:
            driver.start()

        asyncio.run_coroutine_threadsafe(begin(), other).result(GUARD_S)
        with pytest.raises(ConfigError, match="bound to the loop it started on"):
            asyncio.run(asyncio.wait_for(transport.stream(REQUEST), GUARD_S))
        asyncio.run_coroutine_threadsafe(transport.aclose(), other).result(GUARD_S)
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(GUARD_S)
        other.close()


def test_a_failed_step_loop_is_a_connect_error_naming_the_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine("cpu-tiny", seed=1)
    transport = SimTransport(EngineDriver(engine))

    def broken() -> Any:
        raise ZeroDivisionError("step model")

    async def main() -> None:
        with pytest.raises(TransportError):  # the stream in flight is aborted
            await transport.stream(REQUEST)
        with pytest.raises(ConnectError, match="step loop failed: ZeroDivisionError"):
            await transport.stream(REQUEST)
        await transport.aclose()

    engine.step = broken  # type: ignore[method-assign]
    run_virtual(main())
    assert "the simulator's step loop failed" in caplog.text
