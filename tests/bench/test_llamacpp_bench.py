"""``agentflow bench`` against a real llama.cpp server over HTTP (SmolLM2-135M, CPU):
the same levels, figures and report as on the simulator, from a real server's stream."""

from __future__ import annotations

import pytest

from agentflow.bench import (
    BenchConfig,
    FanOut,
    HTTPTarget,
    Load,
    SessionTemplate,
    Workload,
    run_bench,
)
from agentflow.llamacpp import LlamaCppServer

pytestmark = pytest.mark.llamacpp

WORKLOAD = Workload(
    name="tiny-agents",
    shared_prefix_tokens=200,
    templates=(
        SessionTemplate(
            name="parent",
            turns=2,
            prompt_tokens=16,
            output_tokens=8,
            think_time_s=0.2,
            fanout=FanOut(template="sub", width=2),
        ),
        SessionTemplate(name="sub", weight=0, turns=1, prompt_tokens=8, output_tokens=6),
    ),
)


def test_bench_level_on_llamacpp(llamacpp: LlamaCppServer) -> None:
    """One open-loop level (6 sessions, one a second, each run to its script's end — no
    duration, so a slow machine changes timings, never counts): every session and
    sub-agent ran, each turn produced exactly its max_tokens (ignore_eos), and the
    level's figures come from the server's usage and the stream's timing."""
    report = run_bench(
        BenchConfig(
            workload=WORKLOAD,
            levels=(Load(rate=1.0, arrival="constant"),),
            duration_s=None,
            max_sessions=6,
            warmup_s=0.0,
        ),
        HTTPTarget(base_url=llamacpp.base_url),  # the model: the one /v1/models lists
    )
    (level,) = report["levels"]
    sessions = level["sessions"]
    assert sessions["started"] == 6 and sessions["subagents"] == 12 and sessions["drained"]
    assert level["statuses"]["completed"] == 18 and level["errors"]["session"] == 0
    assert level["turns"] == 6 * 2 + 12
    # Outputs of the scripted lengths: 6 parents × (8 + 8) + 12 sub-agents × 6.
    assert level["output_tokens"] == 6 * 16 + 12 * 6
    assert level["ttft_s"]["p50"] > 0 and level["tpot_s"]["p50"] > 0
    assert level["decode_tps_per_agent"]["p50"] > 0 and level["output_tps"] > 0
    assert level["cache_hit_rate"] is not None  # llama.cpp reports cached tokens
    assert report["run"]["target"] == llamacpp.base_url
    assert report["run"]["model"] == "smollm2"
