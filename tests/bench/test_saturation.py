"""A rate sweep against the simulator finds the knee the profile's capacity predicts.

The workload is one-turn requests of a fixed size on the ``cpu-tiny`` profile, whose
step time is a formula of the batch (``Profile.decode_step_s``), so the most requests it
can serve per second follows from the profile alone:

    one request = its prefill (prompt / prefill_tps) + its output tokens decoded in a full
    batch of max_num_seqs sequences, each step taking decode_step_s(max_num_seqs, Σ context)
    capacity    = 1 / (prompt / prefill_tps + output × decode_step_s(B, Σctx) / B)   requests/s

Everything runs in virtual time (``agentflow.embedded``): no wall clock is read or asserted.
"""

from __future__ import annotations

import pytest

from agentflow.bench import SessionTemplate, Workload
from agentflow.bench._bench import BenchConfig, SimTarget, Sweep, run_bench
from agentflow.sim.profiles import get_profile

PROMPT = 64  # tokens of the user message; the chat template adds 9 (73 in usage)
TEMPLATE_TOKENS = 9
OUTPUT = 100

WORKLOAD = Workload(
    name="fixed",
    templates=(SessionTemplate(name="req", turns=1, prompt_tokens=PROMPT, output_tokens=OUTPUT),),
)


def predicted_capacity() -> float:
    """Requests/s the cpu-tiny profile serves at a full batch (see the module docstring)."""
    p = get_profile("cpu-tiny")
    batch = p.max_num_seqs
    prompt = PROMPT + TEMPLATE_TOKENS
    context = batch * (prompt + OUTPUT / 2)  # each sequence, half-way through its output
    step = p.decode_step_s(batch, round(context))
    return 1.0 / (prompt / p.prefill_tps + OUTPUT * step / batch)


def test_capacity_formula_matches_the_profile() -> None:
    """The prediction is the profile's own numbers, not a fitted constant: ~43 req/s."""
    p = get_profile("cpu-tiny")
    assert (p.max_num_seqs, p.per_agent_tps) == (8, 1000.0)
    assert 40 < predicted_capacity() < 46


@pytest.fixture(scope="module")
def sweep_report() -> dict:  # type: ignore[type-arg]
    capacity = predicted_capacity()
    config = BenchConfig(
        workload=WORKLOAD,
        sweep=Sweep(start=0.4 * capacity, factor=1.3, max_levels=10),
        duration_s=20.0,
        warmup_s=2.0,
        seed=3,
    )
    return run_bench(config, SimTarget(profile="cpu-tiny"))


def test_sweep_stops_just_past_the_predicted_knee(sweep_report: dict) -> None:  # type: ignore[type-arg]
    """Levels at 0.4, 0.52, 0.68 and 0.88 of capacity keep up; 1.14 is over-saturated
    (its TTFT and backlog keep growing) and the sweep stops there."""
    capacity = predicted_capacity()
    levels = sweep_report["levels"]
    fractions = [lvl["load"]["value"] / capacity for lvl in levels]
    assert [round(f, 2) for f in fractions] == [0.4, 0.52, 0.68, 0.88, 1.14]
    assert [lvl["saturation"]["saturated"] for lvl in levels] == [False] * 4 + [True]
    assert sweep_report["stopped"] == "over-saturated"
    knee = sweep_report["knee"]["value"] / capacity
    assert 0.85 <= knee < 1.0  # the highest level under the predicted capacity
    last = levels[-1]["saturation"]
    assert last["ttft_growth"] >= 2.0 and last["backlog"] > 0


def test_below_the_knee_throughput_follows_the_load(sweep_report: dict) -> None:  # type: ignore[type-arg]
    """Under capacity every arrival is served: requests/s ≈ the achieved arrival rate,
    and output tok/s = requests/s × the fixed output length."""
    for lvl in sweep_report["levels"][:-1]:
        assert lvl["req_per_s"] == pytest.approx(lvl["window_arrival_rate"], rel=0.08)
        assert lvl["output_tps"] == pytest.approx(lvl["req_per_s"] * OUTPUT, rel=0.02)
        assert lvl["ttft_s"]["p50"] < 0.05  # a prefill step or two, no queue


def test_over_the_knee_throughput_plateaus_at_the_predicted_capacity(
    sweep_report: dict,  # type: ignore[type-arg]
) -> None:
    """Past the knee the server runs full batches: its rate is the profile's capacity
    (within 8%: admission gaps and prefill steps the formula averages out), not the load."""
    over = sweep_report["levels"][-1]
    capacity = predicted_capacity()
    assert over["window_arrival_rate"] > 1.1 * capacity
    assert over["req_per_s"] == pytest.approx(capacity, rel=0.08)
    # Per-agent decode speed at a full batch is the profile's step time over the batch.
    p = get_profile("cpu-tiny")
    full_batch_tps = 1 / p.decode_step_s(p.max_num_seqs, p.max_num_seqs * 123)
    assert over["decode_tps_per_agent"]["p50"] == pytest.approx(full_batch_tps, rel=0.05)


def _entry(value: int, tps: float, ttft: float) -> dict:  # type: ignore[type-arg]
    return {
        "load": {"mode": "concurrency", "value": value},
        "output_tps": tps,
        "ttft_s": {"p50": ttft},
        "saturation": {"saturated": False, "reasons": []},
    }


@pytest.mark.parametrize(
    ("value", "tps", "saturated"),
    [
        (21, 104.2, False),  # +5 % sessions, +4.2 % output: 84 % of linear scaling
        (21, 101.0, True),  # +1 %: 20 % of linear
        (40, 140.0, False),  # twice the sessions, +40 %
        (40, 120.0, True),  # twice the sessions, +20 %
    ],
)
def test_the_throughput_plateau_is_against_the_load_step(
    value: int, tps: float, saturated: bool
) -> None:
    """A flat 5 % bar called a small step (20 → 21 sessions, output +4.2 %, 84 % of
    linear) a plateau: output gain is now compared with the sessions' growth."""
    from agentflow.bench._level_entry import _plateau
    from agentflow.bench._load import Load

    w = Workload(name="x", templates=(SessionTemplate(name="r", prompt_tokens=8, output_tokens=4),))
    config = BenchConfig(workload=w, levels=(Load(concurrency=20), Load(concurrency=value)))
    later = _entry(value, tps, 0.21)
    _plateau(config, later, _entry(20, 100.0, 0.20))
    assert later["saturation"]["saturated"] is saturated
    if saturated:
        assert "of linear scaling" in later["saturation"]["reasons"][0]
    still = _entry(value, tps, 0.20)  # TTFT did not rise: no plateau
    _plateau(config, still, _entry(20, 100.0, 0.20))
    assert not still["saturation"]["saturated"]
