"""Stats of several workers, merged (through pickle, as across processes), equal one process's.

Counters exactly; quantiles exactly as one sketch would give them, hence within α of the
exact nearest-rank values computed from every turn.
"""

from __future__ import annotations

import copy
import pickle
import random
from typing import Any

import pytest

from agentflow import ConfigError, FleetEndEvent, FleetResult, FleetStartEvent, TurnEndEvent
from agentflow.stats import DEFAULT_RELATIVE_ACCURACY, SLO, FleetStats, nearest_rank
from tests.stats.traces import MS, session_end, trace, turn_end

SLOS = [SLO(ttft_s=0.3, tpot_s=0.02), SLO(e2e_s=2.0)]


def workload(n_agents: int, seed: int) -> list[TurnEndEvent]:
    """Random but fixed turns: 1–6 per agent, 5–120 chunks, some without usage or output."""
    rng = random.Random(seed)
    events = []
    for a in range(n_agents):
        t = rng.uniform(0, 5_000)
        for turn in range(rng.randint(1, 6)):
            ready = t
            sent = ready + rng.expovariate(1 / 50)
            first = sent + rng.lognormvariate(4.5, 0.8)
            n = rng.randint(0, 120)
            chunks = [first]
            for _ in range(n - 1):
                chunks.append(chunks[-1] + rng.lognormvariate(2.0, 0.5))
            end = (chunks[-1] if n else sent) + rng.uniform(0, 5)
            usage = rng.random() < 0.8
            prompt = 500 + 400 * turn + rng.randint(0, 50)
            tr = trace(
                sent_ms=sent,
                chunks_ms=chunks if n else [],
                end_ms=end,
                completion=(n + rng.randint(0, 2) if n else 0) if usage else None,
                prompt=prompt if usage else None,
                cached=(prompt - rng.randint(0, 400)) if usage and turn else None,
            )
            events.append(turn_end(f"agent-{a:03d}", f"agent-{a:03d}-s", turn, tr, ready))
            t = end + rng.uniform(10, 200)
    return events


def fed(events: list[Any], **options: Any) -> FleetStats:
    stats = FleetStats(slos=SLOS, start_ns=0, **options)
    for e in events:
        stats(e)
    return stats


def strip(report: dict[str, Any]) -> dict[str, Any]:
    """What a merge may change: worker count, and peak in flight (unknown after a merge)."""
    report = dict(report)
    report["settings"] = {**report["settings"], "workers": None}
    report["fleet"] = {**report["fleet"], "peak_in_flight": None}
    return report


@pytest.mark.parametrize("split", ["by_agent", "by_turn"])
def test_merged_workers_equal_one_process(split: str) -> None:
    """Three workers (agents or single turns spread over them) merge into the whole."""
    events = workload(120, seed=11)
    ends = [session_end(f"agent-{a:03d}", f"agent-{a:03d}-s") for a in range(120)]
    whole = fed(events + ends)
    shards: list[list[Any]] = [[], [], []]
    for i, e in enumerate(events):
        key = int(e.agent[-3:]) if split == "by_agent" else i
        shards[key % 3].append(e)
    for i, end in enumerate(ends):
        shards[i % 3].append(end)
    workers = [pickle.loads(pickle.dumps(fed(s))) for s in shards]
    merged = workers[0]
    for w in workers[1:]:
        merged.merge(w)
    assert merged.workers == 3

    want, got = strip(whole.report()), strip(merged.report())
    assert_same(got, want)

    # And within α of the exact values, computed from every turn.
    exact = {
        "ttft_s": sorted(e.metrics.ttft_s for e in events if e.metrics.ttft_s is not None),
        "itl_s": sorted(x for e in events for x in e.metrics.itl_s),
        "e2e_s": sorted(e.metrics.e2e_s for e in events),
        "tpot_s": sorted(e.metrics.tpot_s for e in events if e.metrics.tpot_s is not None),
    }
    for name, values in exact.items():
        d = got["distributions"][name]
        assert d["count"] == len(values)
        for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)):
            true = values[nearest_rank(q, len(values))]
            assert abs(d[label] - true) <= DEFAULT_RELATIVE_ACCURACY * true + 1e-12, (name, q)


def test_fresh_stats_count_no_worker() -> None:
    """A coordinator reducing into a fresh FleetStats, and a worker that saw nothing,
    add no worker: two fed workers merged into an empty one are 2, not 3."""
    events = workload(6, seed=3)
    a, b = fed(events[::2]), fed(events[1::2])
    assert (FleetStats().workers, a.workers) == (0, 1)
    total = FleetStats(slos=SLOS, start_ns=0)
    total.merge(pickle.loads(pickle.dumps(a)))
    total.merge(b)
    assert total.workers == 2 and total.report()["settings"]["workers"] == 2
    a.merge(FleetStats(slos=SLOS, start_ns=0))
    assert a.report()["settings"]["workers"] == 1
    assert FleetStats().report()["settings"]["workers"] == 1  # a report is one process's
    assert (
        FleetStats.from_result(FleetResult(sessions=[], wall_s=0.0, peak_in_flight=0)).workers == 1
    )


def assert_same(got: Any, want: Any, path: str = "") -> None:
    """Equal, floats to summation-order rounding."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), path
    else:
        assert got == want, path


def test_merge_refuses_incompatible_stats() -> None:
    """Different α, SLOs or row keys cannot be merged."""
    base = FleetStats(slos=SLOS)
    with pytest.raises(ValueError, match="relative_accuracy"):
        base.merge(FleetStats(slos=SLOS, relative_accuracy=0.02))
    with pytest.raises(ValueError, match="SLOs"):
        base.merge(FleetStats())
    with pytest.raises(ValueError, match="per: 'agent' and 'session'"):
        base.merge(FleetStats(slos=SLOS, per="session"))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("start_ns", 5),
        ("bucket_s", 2.0),
        ("max_turn_index", 3),
        ("itl", False),
        ("quantiles", [0.75]),
        ("relative_accuracy", 0.02),
    ],
)
def test_a_refused_merge_changes_nothing(option: str, value: Any) -> None:
    """Every setting is checked before anything is merged: a refused merge leaves the
    target as it was (the sketches used to be merged before the time buckets were checked)."""
    events = workload(6, seed=5)
    target, other = fed(events), FleetStats(slos=SLOS, **{"start_ns": 0, option: value})
    for e in events:
        other(e)
    before = pickle.dumps(target.report())
    with pytest.raises(ValueError, match="merge") as refused:
        target.merge(other)
    assert pickle.dumps(target.report()) == before
    assert isinstance(refused.value, ConfigError)
    assert str(refused.value).startswith("cannot merge stats of different")


def test_workers_that_started_apart_span_the_whole_run() -> None:
    """Worker b starts 30 s after a; each runs 10 s. Merged, the run lasted 40 s (as one
    process that saw every turn says), not the longest worker's 10 s, which would make
    the fleet's output rate 4× too high."""

    def turns(agent: str, t0_ms: int) -> list[Any]:
        return [
            turn_end(agent, f"{agent}-s", i, ready_ms=t0_ms + i * 1000, tr=trace(
                sent_ms=t0_ms + i * 1000,
                chunks_ms=[t0_ms + i * 1000 + 100, t0_ms + i * 1000 + 900],
                end_ms=t0_ms + i * 1000 + 1000,
                completion=100,
            ))
            for i in range(10)
        ]  # fmt: skip

    a, b, whole = FleetStats(), FleetStats(), FleetStats()
    for e in turns("a", 0):
        a(e)
    for e in turns("b", 30_000):
        b(e)
    for e in turns("a", 0) + turns("b", 30_000):
        whole(e)
    a.wall_s = b.wall_s = 10.0
    whole.wall_s = 40.0
    a.merge(b)
    merged, one = a.report()["fleet"], whole.report()["fleet"]
    assert merged["duration_s"] == pytest.approx(one["duration_s"]) == pytest.approx(40.0)
    assert merged["output_tps"] == pytest.approx(one["output_tps"]) == pytest.approx(50.0)


def test_workers_that_started_apart_span_first_start_to_last_end() -> None:
    """Fleet A runs [0, 1.0] s, fleet B [0.5, 1.5] s: merged, the run is 1.5 s from A's
    start, and the last bucket ends with B's fleet (1.5 s), not at 1.0 s."""
    a, b = FleetStats(bucket_s=1.0), FleetStats(bucket_s=1.0)
    for stats, start_ms in ((a, 0), (b, 500)):
        stats(FleetStartEvent(sessions=1, start_ns=start_ms * MS))
        t = trace(sent_ms=start_ms, chunks_ms=[start_ms + 10], end_ms=start_ms + 900, completion=1)
        stats(turn_end("x", f"s{start_ms}", 0, t, start_ms))
        stats(FleetEndEvent(result=FleetResult(sessions=[], wall_s=1.0, peak_in_flight=1)))
    a.merge(b)
    assert a.wall_s == pytest.approx(1.5) and a.origin_ns == 0
    assert a.report()["throughput"]["dt_s"] == pytest.approx([1.0, 0.5])


def test_a_merged_agent_row_shows_the_session_that_ended_last() -> None:
    """per='agent': s1's turn ends at 100 ms, s2's at 500 ms; s2 completes at 500 ms, s1
    fails at 2 s (its next turn never finished). One process shows 'error s1'; merged
    workers did too, not the session of the worker whose last *turn* ended later."""
    now = [0]
    t1 = turn_end("a", "s1", 0, trace(sent_ms=0, chunks_ms=[10], end_ms=100, completion=1), 0)
    t2 = turn_end("a", "s2", 0, trace(sent_ms=0, chunks_ms=[10], end_ms=500, completion=1), 0)
    e1, e2 = session_end("a", "s1", "error"), session_end("a", "s2")
    one, w1, w2 = (FleetStats(clock=lambda: now[0]) for _ in range(3))
    feed: list[tuple[FleetStats, Any, int]] = [
        (one, t1, 100), (w1, t1, 100), (one, t2, 500), (w2, t2, 500),
        (one, e2, 500), (w2, e2, 500), (one, e1, 2000), (w1, e1, 2000),
    ]  # fmt: skip
    for stats, e, at_ms in feed:
        now[0] = at_ms * MS
        stats(e)
    for first, second in ((w1, w2), (w2, w1)):
        merged = copy.deepcopy(first)  # (its clock, a local function, does not pickle)
        merged.merge(second)
        (row,) = merged.report()["agents"]
        assert (row["status"], row["session_id"]) == ("error", "s1")
    (row,) = one.report()["agents"]
    assert (row["status"], row["session_id"]) == ("error", "s1")
