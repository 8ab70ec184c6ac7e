"""Engine.abort: O(1) per call, and the engine acts as if aborted requests were removed at once.

A cancelled fleet aborts every request it has queued; with an abort that scans the
queue that is O(n²) on the simulator's loop (16,000 waiting took 41 µs per abort).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentflow.sim import Engine
from agentflow.sim.metrics import SimMetrics
from agentflow.sim.records import DriverStats
from agentflow.sim.sequence import ENDED, RUNNING, SeqState

from .util import TINY, request, tokens

N_REQUESTS = 96


class EagerEngine(Engine):
    """The reference: an abort that takes the request out of the batch or queue at once."""

    def abort(self, request_id: int) -> bool:
        seq = self._active.pop(request_id, None)
        if seq is None:
            return False
        if seq.state == RUNNING:
            self._running.remove(seq)
            self.kv.free(seq.blocks)
        else:
            self._waiting.remove(seq)
        seq.state = ENDED
        seq.record.finish_reason = "abort"
        seq.record.finished_s = self._now
        self._aborted += 1
        return True


def _loaded(cls: type[Engine]) -> tuple[Engine, list[int]]:
    """cpu-tiny with running, waiting and preempted requests sharing some prefixes."""
    engine = cls(TINY, seed=3)
    # Long ones first: they outgrow the KV cache and the newest get preempted.
    ids = [engine.add(request(tokens(500 + i, 600), 400, out_seed=500 + i)) for i in range(6)]
    for i in range(N_REQUESTS - 6):
        prompt = tokens(i % 5, 32) + tokens(100 + i, 40 + 37 * (i % 11))
        ids.append(engine.add(request(prompt, 20 + 13 * (i % 17), out_seed=i)))
    while not engine.stats().num_preemptions:
        engine.step()
    return engine, ids


_DRIVER = DriverStats(
    time_scale=1.0,
    steps=0,
    late_steps=0,
    resyncs=0,
    lag_s=0.0,
    max_late_s=0.0,
    flushes=0,
    submitted=0,
    active=0,
    cancelled=0,
)


def _snapshot(engine: Engine) -> tuple[Any, ...]:
    stats = engine.stats()
    exposition = SimMetrics("m").render(stats, _DRIVER)
    gauges = [line for line in exposition.splitlines() if line.startswith("vllm:num_requests")]
    return (engine.running_ids, engine.waiting_ids, engine.has_work, stats, gauges)


def _transcript(engine: Engine) -> list[Any]:
    out: list[Any] = []
    while engine.has_work:
        run = engine.decode_run(7)
        out.append(run if run is not None else engine.step())
        out.append(_snapshot(engine))
    out.append([engine.record(i) for i in range(N_REQUESTS)])
    return out


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("order", ["oldest", "newest", "shuffled"])
def test_abort_in_any_order_acts_as_an_immediate_removal(order: str, share: float) -> None:
    reference, _ = _loaded(EagerEngine)
    engine, _ = _loaded(Engine)
    running, waiting = engine.running_ids, engine.waiting_ids
    assert running and waiting and _snapshot(engine) == _snapshot(reference)
    assert any(engine.record(r).num_preemptions for r in waiting), "no preempted one waits"
    live = [*running, *waiting]
    rng = random.Random(len(order) * 1000 + int(share * 10))
    gone = rng.sample(live, int(len(live) * share))
    gone.sort()
    if order == "newest":
        gone.reverse()
    elif order == "shuffled":
        rng.shuffle(gone)
    for rid in gone:
        assert engine.abort(rid) and reference.abort(rid)
        assert not engine.abort(rid)
        assert _snapshot(engine) == _snapshot(reference)
    # Counts and ids leave the aborted ones out (the /metrics gauges come from them).
    assert engine.running_ids == tuple(r for r in running if r not in gone)
    assert engine.waiting_ids == tuple(r for r in waiting if r not in gone)
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting) == (
        len(engine.running_ids),
        len(engine.waiting_ids),
    )
    assert stats.requests_aborted == len(gone)
    assert all(engine.record(r).finish_reason == "abort" for r in gone)
    # Then everything runs as if they had been removed at once: the same steps, the
    # same records, the same prefix cache.
    assert _transcript(engine) == _transcript(reference)
    assert engine.kv.free_order() == reference.kv.free_order()


def test_aborting_everything_leaves_an_idle_engine() -> None:
    engine, ids = _loaded(Engine)
    for rid in reversed(ids):
        engine.abort(rid)
    assert not engine.has_work and engine.num_running == engine.num_waiting == 0
    assert engine.running_ids == engine.waiting_ids == ()
    assert engine.kv.used_blocks == 0
    step = engine.step()
    assert step.idle and engine.run_until_idle() == 0
    late = engine.add(request(tokens(9, 40), 3))
    engine.run_until_idle()
    assert engine.record(late).finish_reason == "stop"


def test_abort_does_not_scan_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Aborting n requests compares no sequences (the old abort compared O(n²) pairs)."""
    comparisons = 0

    def counting_eq(self: SeqState, other: object) -> bool:
        nonlocal comparisons
        comparisons += 1
        return self is other

    monkeypatch.setattr(SeqState, "__eq__", counting_eq, raising=False)
    for order in ("oldest", "newest", "shuffled"):
        engine = Engine(TINY, seed=1)
        ids = [engine.add(request(tokens(i, 8), 2)) for i in range(2000)]
        engine.step()  # 8 running
        if order == "newest":
            ids.reverse()
        elif order == "shuffled":
            random.Random(0).shuffle(ids)
        comparisons = 0
        for rid in ids:
            assert engine.abort(rid)
        assert comparisons <= len(ids), order
        assert not engine.has_work
