"""The bench measures its own client: a level run on real time carries the client's
event-loop lag and how its reads were stamped, and an over-saturated level whose client
lagged says so — the verdict blamed the server for a client too busy to keep up."""

from __future__ import annotations

from typing import Any

from agentflow.bench import Load, SessionTemplate, Workload
from agentflow.bench._bench import BenchConfig, HTTPTarget, arun_bench
from agentflow.bench._level_entry import _plateau, note_lag
from agentflow.testing import Reply, ScriptedServer

WORKLOAD = Workload(
    name="one-turn",
    templates=(SessionTemplate(name="req", turns=1, prompt_tokens=8, output_tokens=4),),
)


async def test_a_real_time_level_reports_the_clients_loop_lag() -> None:
    async with ScriptedServer([Reply.text("a b c d")] * 2) as srv:
        report = await arun_bench(
            BenchConfig(
                workload=WORKLOAD,
                levels=(Load(rate=100.0, arrival="constant"),),
                duration_s=None,
                max_sessions=2,
                warmup_s=0.0,
            ),
            HTTPTarget(base_url=srv.base_url, model="m"),
        )
    (level,) = report["levels"]
    assert level["turns"] == 2
    run = level["repeats"][0]["report"]["run"]
    assert run["reads_stamped_by"] in ("kernel", "event loop")
    lag = run["loop_lag"]
    assert lag["count"] >= 1 and "p99_s" in lag and "wakeup_late_p99_s" in lag


def _level(saturated: bool, lag_p99_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """A level's summary and report: TTFT p50 20 ms, ITL p50 5 ms, the given lag."""
    reasons = ["time to first token grew 3.0× (+0.50 s) over the window"] if saturated else []
    summary = {"saturation": {"saturated": saturated, "reasons": reasons}}
    report = {
        "run": {
            "loop_lag": {"p99_s": lag_p99_s, "wakeup_late_p99_s": lag_p99_s},
            "reads_stamped_by": "event loop",
        },
        "distributions": {
            "ttft_s": {"count": 10, "p50": 0.020},
            "itl_s": {"count": 10, "p50": 0.005},
        },
    }
    return summary, report


def test_an_over_saturated_verdict_notes_a_lagging_client() -> None:
    summary, report = _level(True, 0.040)
    note_lag(summary, [report], "rate=100/s")
    reasons = summary["saturation"]["reasons"]
    assert len(reasons) == 2
    assert "40.00 ms at p99" in reasons[1] and "stamped by the event loop" in reasons[1]
    assert "client" in reasons[1]

    summary, report = _level(True, 0.00001)  # an idle client: the server's verdict stands
    note_lag(summary, [report], "rate=100/s")
    assert len(summary["saturation"]["reasons"]) == 1

    summary, report = _level(False, 0.040)  # not saturated: no verdict to qualify
    note_lag(summary, [report], "rate=100/s")
    assert summary["saturation"]["reasons"] == []


def test_a_plateau_verdict_notes_a_lagging_client_too() -> None:
    """A fixed-concurrency level judged over-saturated only by its throughput plateau
    (a verdict made on the level's entry, after its runs) gets the note as well."""
    _, report = _level(False, 0.040)
    entry: dict[str, Any] = {
        "load": {"mode": "concurrency", "value": 8},
        "output_tps": 101.0,
        "ttft_s": {"p50": 0.030},
        "saturation": {"saturated": False, "reasons": []},
    }
    previous = {"load": {"mode": "concurrency", "value": 4}, "output_tps": 100.0,
                "ttft_s": {"p50": 0.020}}  # fmt: skip
    config = BenchConfig(workload=WORKLOAD, levels=(Load(concurrency=4), Load(concurrency=8)))
    _plateau(config, entry, previous)
    note_lag(entry, [report], "concurrency=8")
    reasons = entry["saturation"]["reasons"]
    assert entry["saturation"]["saturated"] and len(reasons) == 2
    assert reasons[0].startswith("output tok/s grew") and "40.00 ms at p99" in reasons[1]
