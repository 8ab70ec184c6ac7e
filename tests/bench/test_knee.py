"""The knee is the highest level below the first one the server did not keep up with,
in order of load: levels given in another order (``--rate 4,2``) named the last level
run before a failure, or the last one run."""

from __future__ import annotations

from agentflow.bench import SessionTemplate, Workload
from agentflow.bench._bench import BenchConfig, SimTarget, run_bench
from agentflow.bench._load import Load

WORK = Workload(
    name="x", templates=(SessionTemplate(name="r", prompt_tokens=64, output_tokens=100),)
)


def _bench(*rates: float) -> dict:  # type: ignore[type-arg]
    return run_bench(
        BenchConfig(workload=WORK, levels=tuple(Load(rate=r) for r in rates), duration_s=5.0),
        SimTarget(profile="cpu-tiny"),
    )


def test_levels_in_descending_order_name_the_highest() -> None:
    report = _bench(4.0, 2.0)
    assert [lvl["saturation"]["saturated"] for lvl in report["levels"]] == [False, False]
    assert report["knee"]["label"] == "rate=4/s"


def test_a_saturated_level_run_first_leaves_the_lower_ones() -> None:
    report = _bench(200.0, 2.0, 4.0)
    assert [lvl["saturation"]["saturated"] for lvl in report["levels"]] == [True, False, False]
    assert report["knee"]["label"] == "rate=4/s"
