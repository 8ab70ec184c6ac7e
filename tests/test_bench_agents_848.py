"""``benchmarks/agents_848.py`` at a tiny size over loopback: the step-paced server's write
log and the benchmark's figures are complete and consistent. Nothing here asserts a speed
or a latency (those are the benchmark's to measure, in ``docs/benchmarks.md``)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow import Agent, Fleet, HTTPTransport

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmarks are scripts, not a package
import agents_848  # noqa: E402

AGENTS, TOKENS, STEP_MS = 4, 20, 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with agents_848.step_server(STEP_MS, max_seconds=300) as (url, pid):
        yield url, pid


def check(run: agents_848.Run) -> None:
    """What every run must account for, whatever the machine's speed."""
    assert run.tokens_counted == AGENTS * TOKENS  # every token reached the callback
    assert run.streams_logged == AGENTS
    assert run.writes_logged == AGENTS * TOKENS  # one logged write per token per stream
    assert len(run.tpot_err) == AGENTS  # one TPOT error per stream ...
    assert all(math.isfinite(e) and e >= 0 for e in run.tpot_err)  # ... each a number
    assert math.isfinite(run.delay_p50) and math.isfinite(run.delay_p99)
    assert run.delay_p50 <= run.delay_p99
    assert run.step_ms == pytest.approx(STEP_MS)
    assert 0 < run.tokens_in_window < AGENTS * TOKENS  # the window starts at the first
    assert run.window_s > 0 and run.parent_cpu_s > 0
    assert run.lag, "the lag probe took no sample while the server wrote"
    assert all(math.isfinite(x) for x in run.lag)
    # the server's rate: its TPOT spans the same (tokens - 1) intervals as the client's
    assert run.server_tpot_ms > 0


@pytest.mark.parametrize("kernel_stamps", [False, True], ids=["loop", "kernel"])
def test_one_process(server: tuple[str, int], kernel_stamps: bool) -> None:
    url, pid = server
    run = asyncio.run(
        agents_848.measure(url, pid, AGENTS, TOKENS, workers=None, kernel_stamps=kernel_stamps)
    )
    check(run)
    assert run.workers_cpu_s == 0 and run.extra["worker_loops"] == 0
    assert run.lag == run.parent_lag  # one loop: the parent's


def test_two_workers(server: tuple[str, int]) -> None:
    url, pid = server
    run = asyncio.run(agents_848.measure(url, pid, AGENTS, TOKENS, workers=2, kernel_stamps=False))
    check(run)
    assert run.extra["worker_loops"] == 2  # each worker's loop wrote its probe samples
    assert run.workers_cpu_s > 0
    assert run.parent_lag  # the parent's own loop is probed too
    # the report's table and projection come out of such runs
    runs: dict[agents_848.Key, list[agents_848.Run]] = {(AGENTS, 2, False): [run]}
    table = agents_848.table(runs, {(AGENTS, 2, False): []})
    assert table.count("\n") == 2 and "| 4 | 2 workers | loop |" in table
    proj = agents_848.projection(runs)
    assert proj is not None and proj.parent_at == proj.workers_at == AGENTS
    assert proj.by_parent > 0 and proj.by_workers > 0
    assert proj.agents_16 == min(proj.by_parent, proj.by_workers)
    assert "16-core" in agents_848.projection_text(proj)


async def _get(url: str, target: str) -> tuple[bytes, bytes]:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {target} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


def test_step_server_keeps_the_other_modes(server: tuple[str, int]) -> None:
    """A request without ``run`` is streamed as before (bulk and paced); an unknown run's
    log is a 404 that names the run."""
    url, _ = server

    async def main() -> tuple[list[int], tuple[bytes, bytes]]:
        async with HTTPTransport(url) as http:
            fleet = Fleet(http, max_concurrency=2)
            sessions = [
                Agent(name="bulk", model="m", params={"max_tokens": 7}).session("q"),
                Agent(name="paced", model="m", params={"max_tokens": 5, "pace_ms": 1}).session("q"),
            ]
            result = await fleet.run(sessions)
        chunks = [len(s.turns[0].trace.chunk_ns) for s in result.sessions]
        return chunks, await _get(url, "/writelog?run=nope")

    chunks, (status, body) = asyncio.run(main())
    assert chunks == [7, 5]
    assert status.startswith(b"HTTP/1.1 404")
    assert "nope" in json.loads(body)["error"]["message"]
