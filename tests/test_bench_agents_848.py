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


async def _stream(url: str, body: dict[str, object]) -> bytes:
    """One raw chat-completions request; the whole chunked response."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = json.dumps(body).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(data), data)
    )
    raw = b""
    while not raw.endswith(b"\r\n0\r\n\r\n"):
        chunk = await asyncio.wait_for(reader.read(65536), 30)
        assert chunk, f"the server closed the stream early: {raw[-200:]!r}"
        raw += chunk
    writer.close()
    return raw


def test_step_group_writes_in_lockstep(server: tuple[str, int]) -> None:
    """A run's streams start together once all ``expect`` joined, and step k writes token k
    to every stream before any stream gets token k + 1; the log has one write per token."""
    url, _ = server
    n, streams = 6, ["a", "b", "c"]

    async def main() -> tuple[list[bytes], dict[str, object]]:
        bodies = [
            {"max_tokens": n, "run": "lockstep", "stream_id": s, "expect": len(streams)}
            for s in streams
        ]
        raws = await asyncio.gather(*(_stream(url, b) for b in bodies))
        status, body = await _get(url, "/writelog?run=lockstep")
        assert status.startswith(b"HTTP/1.1 200")
        return raws, json.loads(body)

    raws, log = asyncio.run(main())
    for raw in raws:
        assert raw.count(b'"delta":{"content":" ') == n  # n content frames
        assert b'"completion_tokens":6' in raw and b"data: [DONE]" in raw
    assert log["done"] is True and log["joined"] == log["expect"] == 3
    assert log["step_ns"] == round(STEP_MS * 1e6)
    got = log["streams"]
    assert isinstance(got, dict) and sorted(got) == streams
    writes = [got[s]["writes"] for s in streams]
    assert all(len(w) == n for w in writes)
    assert all(got[s]["tail_ns"] > got[s]["writes"][-1] for s in streams)
    t0 = log["t0_ns"]
    assert isinstance(t0, int)
    for k in range(n):  # the k-th writes of all streams come before any (k+1)-th
        assert min(w[k] for w in writes) >= t0
        if k + 1 < n:
            assert max(w[k] for w in writes) < min(w[k + 1] for w in writes)
    # a finished run's log is handed out once
    status, _ = asyncio.run(_get(url, "/writelog?run=lockstep"))
    assert status.startswith(b"HTTP/1.1 404")


def test_a_stream_joining_a_finished_run_is_still_served(server: tuple[str, int]) -> None:
    """A late stream (a retry) that joins a run whose steps had ended gets its tokens on
    the run's step grid instead of waiting for its client's idle timeout."""
    url, _ = server
    n = 4

    async def main() -> tuple[bytes, bytes, dict[str, object]]:
        body = {"max_tokens": n, "run": "late", "expect": 1}
        first = await _stream(url, {**body, "stream_id": "a"})
        late = await _stream(url, {**body, "stream_id": "b"})  # the run had finished
        status, log = await _get(url, "/writelog?run=late")
        assert status.startswith(b"HTTP/1.1 200")
        return first, late, json.loads(log)

    first, late, log = asyncio.run(main())
    for raw in (first, late):
        assert raw.count(b'"delta":{"content":" ') == n and b"data: [DONE]" in raw
    got = log["streams"]
    assert isinstance(got, dict) and sorted(got) == ["a", "b"]
    step, t0 = log["step_ns"], log["t0_ns"]
    assert isinstance(step, int) and isinstance(t0, int)
    writes = got["b"]["writes"]
    assert len(writes) == n and writes[0] > got["a"]["writes"][-1]
