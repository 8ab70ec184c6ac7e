"""Client-measured TTFT, TPOT and E2E against the simulator's ground truth, over real HTTP.

The client is agentflow's own: :class:`HTTPTransport` timestamps every read and
:func:`turn_metrics` computes TTFT = first output chunk − request sent, E2E = last chunk −
request sent and TPOT = (E2E − TTFT) / (output tokens − 1). The ground truth is the
simulator's record of the same request from ``GET /agentflow/requests/{id}``: TTFT = first
token − arrival (the moment the server's handler started), engine seconds × the time scale.
The simulator runs in a child process (``python -m agentflow.sim``), as it would for a real
fleet.

What is asserted is what the design guarantees on any machine, however loaded: the
accounting agrees exactly (tokens, time scale, response ids), and causality holds — the
client sends before the server's arrival stamp and reads a token only after the step that
made it was due, so the client's TTFT and E2E are never shorter than the server's. How
*close* they are is a real-time figure, which depends on the machine and its load; it is
measured in ``benchmarks/fidelity.py`` (``docs/benchmarks.md``, section Fidelity), not
asserted here: a single real-time sample on a busy 2-core machine says nothing reliable.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from agentflow import HTTPTransport, TurnTrace, turn_metrics
from agentflow._process import ChildServer
from agentflow.transport import ChatRequest

from .simhttp import STEPPY, user
from .simproc import sim_child

#: Output tokens per request (plus 0–6, so that streams do not all end in one step).
TOKENS = 40
#: How much earlier than the server the client may place an instant (s): the kernel's
#: receive stamps are converted to the client's clock, which costs a few µs of accuracy.
SLACK_S = 0.0005
#: (streams, time scale, stagger s).
CASES = [(1, 1.0, 0.0), (16, 1.0, 0.0005), (16, 4.0, 0.002)]


@pytest.fixture(scope="module")
def sim_url() -> Iterator[Callable[[float], str]]:
    """``python -m agentflow.sim`` with the STEPPY profile, one child process per time scale
    (each dies with the test process, however it ends: :func:`.simproc.sim_child`)."""
    children: dict[float, tuple[ChildServer, str]] = {}

    def url(scale: float) -> str:
        if scale not in children:
            args = ["--profile", "cpu-tiny"]
            for field in (
                "kv_capacity_tokens",
                "max_num_seqs",
                "max_model_len",
                "max_num_batched_tokens",
                "per_agent_tps",
                "decode_per_seq_s",
                "decode_per_ctx_token_s",
            ):
                args += ["--profile-set", f"{field}={getattr(STEPPY, field)}"]
            args += ["--answer-tokens", "200", "--time-scale", str(scale), "--quiet"]
            children[scale] = sim_child(*args)
        return children[scale][1]

    try:
        yield url
    finally:
        for child, _ in children.values():
            child.stop()


async def measure(url: str, streams: int, stagger: float) -> list[dict[str, float]]:
    """Per request: client and truth TTFT and E2E (s), TPOT both ways."""
    async with HTTPTransport(f"{url}/v1") as t, aiohttp.ClientSession() as s:

        def request(i: int, tokens: int) -> ChatRequest:
            text = f"agent {i} asks a question"
            return ChatRequest(model="m", messages=user(text), params={"max_tokens": tokens})

        async def staggered(i: int) -> TurnTrace:
            await asyncio.sleep(i * stagger)
            return await t.stream(request(i, TOKENS + i % 7))

        # Warm the connection pool (one connection per stream), then measure.
        await asyncio.gather(*(t.stream(request(i, 2)) for i in range(streams)))
        traces = await asyncio.gather(*(staggered(i) for i in range(streams)))
        rows = []
        for trace in traces:
            async with s.get(f"{url}/agentflow/requests/{trace.response_id}") as r:
                truth = await r.json()
            m = turn_metrics(trace)
            assert truth["id"] == trace.response_id
            assert truth["completion_tokens"] == m.output_tokens >= TOKENS
            assert m.ttft_s is not None and m.tpot_s is not None and m.e2e_s is not None
            k = float(trace.response_headers["x-agentflow-time-scale"])
            assert k == truth["time_scale"]
            rows.append(
                {
                    "ttft": m.ttft_s,
                    "true_ttft": truth["ttft_s"] * k,
                    "e2e": m.e2e_s,
                    "true_e2e": truth["e2e_s"] * k,
                    "tpot": m.tpot_s,
                    "true_tpot": truth["tpot_s"] * k,
                }
            )
    return rows


@pytest.mark.parametrize(("streams", "scale", "stagger"), CASES)
async def test_client_timings_are_causal_against_ground_truth(
    sim_url: Callable[[float], str], streams: int, scale: float, stagger: float
) -> None:
    """Every request: tokens counted alike; the client's TTFT and E2E never shorter than the
    server's; TPOT the formula's (E2E − TTFT) / (tokens − 1) of the same trace."""
    rows = await measure(sim_url(scale), streams, stagger)
    assert len(rows) == streams
    for row in rows:
        assert row["ttft"] >= row["true_ttft"] - SLACK_S, row
        assert row["e2e"] >= row["true_e2e"] - SLACK_S, row
        assert row["e2e"] > row["ttft"] > 0 and row["tpot"] > 0 and row["true_tpot"] > 0, row
    d_ttft = [row["ttft"] - row["true_ttft"] for row in rows]
    print(
        f"{streams} streams, time scale {scale:g}: TTFT client − truth median "
        f"{statistics.median(d_ttft) * 1e3:+.2f} ms (a figure, not a check: see "
        "benchmarks/fidelity.py)"
    )
