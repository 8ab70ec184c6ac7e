"""The demo builds its workload with the event loop running: a chunk of agents
(``BUILD_CHUNK``) at a time, then their sessions the same way. It was one synchronous
block (20,000 agents: 12.6 s), during which a Ctrl-C or SIGTERM — which cancels the run's
task on the loop — was not handled; now the run is cancelled at the next chunk. The
workload is the same as ``make_workload``'s for a seed."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.demo import run as demo_run
from agentflow.demo._config import DemoConfig
from agentflow.demo._stop import Stopper
from agentflow.demo.workload import BUILD_CHUNK, Workload, build_workload, make_workload
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver

AGENTS = 10 * BUILD_CHUNK


def _plain(w: Workload) -> object:
    return (
        [(a.name, a.model, a.instructions, a.params, a.max_turns) for a in w.agents],
        w.tasks,
        w.tool_rounds,
        w.shared_prefix_chars,
    )


def test_the_workload_built_in_chunks_is_make_workloads() -> None:
    options = {"model": "m", "seed": 7, "turns": (2, 9), "max_tokens": 32}
    built = asyncio.run(build_workload(3 * BUILD_CHUNK + 5, **options))
    assert _plain(built) == _plain(make_workload(3 * BUILD_CHUNK + 5, **options))  # type: ignore[arg-type]


def _start(config: DemoConfig, stop_at: int | None) -> tuple[int, bool]:
    """Start the demo's fleet on the simulator; count the other task's turns on the loop
    until the run starts (or, ``stop_at``, cancel the run at that turn). Returns the
    turns and whether the run started."""
    watched = demo_run._Watched()

    async def main() -> tuple[int, bool]:
        transport = SimTransport(EngineDriver(Engine(config.profile, seed=config.seed)))
        run = asyncio.ensure_future(
            demo_run._run_fleet(config, transport, None, Stopper(), loop_clock, watched=watched)
        )
        turns = 0
        try:
            while watched.start_ns is None and not run.done():
                turns += 1
                if turns == stop_at:
                    run.cancel()  # as Ctrl-C's handler (asyncio.Runner) does
                await asyncio.sleep(0)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
        finally:
            await transport.aclose()
        return turns, watched.start_ns is not None

    return run_virtual(main())


def test_the_loop_runs_while_the_workload_is_built() -> None:
    config = DemoConfig(agents=AGENTS, turns=(1, 1), virtual=True, live=False)
    turns, started = _start(config, None)
    assert started
    assert turns >= 2 * AGENTS // BUILD_CHUNK  # the agents', then the sessions' chunks


def test_a_cancel_while_the_workload_is_built_stops_the_run_before_it_starts() -> None:
    config = DemoConfig(agents=AGENTS, turns=(1, 1), virtual=True, live=False)
    turns, started = _start(config, 3)
    assert turns == 3
    assert not started
