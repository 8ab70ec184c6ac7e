"""Client-measured TTFT and TPOT agree with the simulator's ground truth.

The client is agentflow's own: :class:`HTTPTransport` timestamps every read and
:func:`turn_metrics` computes TTFT = first output chunk − request sent and TPOT =
(E2E − TTFT) / (output tokens − 1). The ground truth is the simulator's record of the same
request from ``GET /agentflow/requests/{id}``: TTFT = first token − arrival (the moment the
server's handler started), TPOT = (last token − first token) / (tokens − 1), engine seconds
× the time scale. The simulator runs in a child process (``python -m agentflow.sim``), as
it would for a real fleet, on a profile with ~3 ms steps (+20 µs per sequence); each
request asks for 40–46 tokens; streams start 0.5 ms apart (2 ms at time scale 4).

Measured on a 2-CPU VM (5 runs each; TTFT: median of the per-run medians, and the worst
request; TPOT: the worst request's relative difference):

=========  ==========  ===========================  ==================
streams    time scale  TTFT client − truth          TPOT client − truth
=========  ==========  ===========================  ==================
1          1           +2.1 ms (worst +2.2 ms)      ≤ 0.6 %
16         1           +5 ms (worst +11 ms)         ≤ 4 %
64         1           +15…25 ms (worst +50 ms)     ≤ 8 %
64         4           +3.9 ms (worst +8.7 ms)      ≤ 0.9 %
=========  ==========  ===========================  ==================

Where the differences come from (measured by placing both sides on the host's monotonic
clock with the record's ``loop_origin_s``): with one stream, ~0.8 ms from the client's send
to the server's handler (two processes waking up) and ~1 ms from a token's step end to the
client's read (the event loop's timers fire up to 1 ms late: epoll's resolution). With many
streams the client's own work dominates: the transport these figures were measured with
(aiohttp, now ``AiohttpTransport``) timestamped a read when its task ran, so when many
streams get a chunk in the same step, the last task's stamp includes every earlier task's
processing (tens of µs per chunk), and a burst of requests is sent one after another.
Slowing the rack down (time scale 4) leaves the client room, and the agreement comes back.
(The default transport now stamps each read in ``data_received``, as it comes off the
socket; these tolerances were kept as they were.) The tolerances asserted below are about
twice the worst seen, and a case passes if one of three attempts is within them, so that a
busy CI machine passes (64 streams at time scale 1: a regression guard only).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from agentflow import ChatRequest, HTTPTransport, TurnTrace, turn_metrics

from .simhttp import STEPPY, user

#: Output tokens per request (plus 0–6, so that streams do not all end in one step).
TOKENS = 40
#: Measurements per case before it fails.
ATTEMPTS = 3
#: (streams, time scale, stagger s, TTFT tolerance s, TPOT tolerance relative).
CASES = [
    (1, 1.0, 0.0, 0.006, 0.02),
    (16, 1.0, 0.0005, 0.025, 0.08),
    (64, 1.0, 0.0005, 0.100, 0.15),
    (64, 4.0, 0.002, 0.020, 0.03),
]


@pytest.fixture(scope="module")
def sim_url() -> Iterator[Callable[[float], str]]:
    """``python -m agentflow.sim`` with the STEPPY profile, one child process per time scale."""
    procs: dict[float, tuple[subprocess.Popen[str], str]] = {}

    def url(scale: float) -> str:
        if scale not in procs:
            cmd = [sys.executable, "-m", "agentflow.sim", "--port", "0", "--profile", "cpu-tiny"]
            for field in (
                "kv_capacity_tokens",
                "max_num_seqs",
                "max_model_len",
                "max_num_batched_tokens",
                "per_agent_tps",
                "decode_per_seq_s",
                "decode_per_ctx_token_s",
            ):
                cmd += ["--profile-set", f"{field}={getattr(STEPPY, field)}"]
            cmd += ["--answer-tokens", "200", "--time-scale", str(scale), "--quiet"]
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            m = re.search(r"(http://\S+)/v1", line)
            if m is None:
                proc.kill()
                proc.wait()
                proc.stdout.close()
                raise AssertionError(f"the simulator did not start: {line!r}")
            procs[scale] = (proc, m.group(1))
        return procs[scale][1]

    try:
        yield url
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


async def measure(url: str, streams: int, stagger: float) -> tuple[list[float], list[float]]:
    """Per request: TTFT client − truth (s), and TPOT (client − truth) / truth."""
    async with HTTPTransport(f"{url}/v1") as t, aiohttp.ClientSession() as s:

        def request(i: int, tokens: int) -> ChatRequest:
            text = f"agent {i} asks a question"
            return ChatRequest(model="m", messages=user(text), params={"max_tokens": tokens})

        async def staggered(i: int) -> TurnTrace:
            await asyncio.sleep(i * stagger)
            return await t.stream(request(i, TOKENS + i % 7))

        # Warm the connection pool (one connection per stream), then measure. The ground
        # truth is fetched after every stream ended, so that no client task's extra work
        # delays another's read timestamps.
        await asyncio.gather(*(t.stream(request(i, 2)) for i in range(streams)))
        traces = await asyncio.gather(*(staggered(i) for i in range(streams)))
        d_ttft: list[float] = []
        d_tpot: list[float] = []
        for trace in traces:
            async with s.get(f"{url}/agentflow/requests/{trace.response_id}") as r:
                truth = await r.json()
            m = turn_metrics(trace)
            assert truth["completion_tokens"] == m.output_tokens >= TOKENS
            assert m.ttft_s is not None and m.tpot_s is not None
            k = float(trace.response_headers["x-agentflow-time-scale"])
            assert k == truth["time_scale"]
            d_ttft.append(m.ttft_s - truth["ttft_s"] * k)
            tpot = truth["tpot_s"] * k
            d_tpot.append((m.tpot_s - tpot) / tpot)
    return d_ttft, d_tpot


@pytest.mark.parametrize(("streams", "scale", "stagger", "ttft_tol", "tpot_rel"), CASES)
async def test_ttft_and_tpot_agree_with_ground_truth(
    sim_url: Callable[[float], str],
    streams: int,
    scale: float,
    stagger: float,
    ttft_tol: float,
    tpot_rel: float,
) -> None:
    """Within the tolerances in one of three attempts (other load on the machine skews one)."""
    url = sim_url(scale)
    summaries = []
    for _ in range(ATTEMPTS):
        d_ttft, d_tpot = await measure(url, streams, stagger)
        worst_tpot = max(abs(x) for x in d_tpot)
        summary = (
            f"{streams} streams, time scale {scale:g}: TTFT client − truth median "
            f"{statistics.median(d_ttft) * 1e3:+.2f} ms, range {min(d_ttft) * 1e3:+.2f} … "
            f"{max(d_ttft) * 1e3:+.2f} ms; TPOT relative max |Δ| {worst_tpot:.2%}"
        )
        print(summary)
        summaries.append(summary)
        # The client always measures from before the server saw the request.
        assert min(d_ttft) > -0.0005, summary
        if max(d_ttft) <= ttft_tol and worst_tpot <= tpot_rel:
            return
    pytest.fail(
        f"no attempt within TTFT ≤ {ttft_tol * 1e3:g} ms, TPOT ≤ {tpot_rel:.0%}:\n"
        + "\n".join(summaries)
    )
