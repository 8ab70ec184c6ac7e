"""A compacted turn's queue wait starts when its prompt is built, the context policy
applied: the summary request before it (its own model request, 2 virtual seconds here)
is not client-side queueing. docs/metrics.md said ``ready_ns`` was "previous tool results
appended", which would have put the summary request in it; the time is the
``CompactionEvent.trace``'s, summed in the report's ``fleet.compaction.e2e_s``."""

from __future__ import annotations

from tests.stats.test_compaction_tokens import SUMMARY_S, run_compacted


def test_a_compactions_time_is_on_its_event_not_in_the_turns_queue_wait() -> None:
    _, live, _, result, events = run_compacted()
    (compaction,) = [e for e in events if e.type == "compaction"]
    turns = result.sessions[0].turns
    before, turn = turns[compaction.turn - 1], turns[compaction.turn]
    summary = compaction.trace
    # previous turn (and its tools) → summary request → the turn ready → sent
    ready = turn.trace.sent_ns - round(turn.metrics.queue_wait_s * 1e9)
    assert before.trace.end_ns <= summary.sent_ns < summary.end_ns <= ready
    assert (summary.end_ns - summary.sent_ns) / 1e9 >= SUMMARY_S
    assert turn.metrics.queue_wait_s < SUMMARY_S  # no slot to wait for: nothing queued
    assert all(t.metrics.queue_wait_s == 0.0 for t in turns)
    report = live.report()
    assert report["distributions"]["queue_wait_s"]["max"] == 0.0
    assert report["fleet"]["compaction"]["e2e_s"] == (summary.end_ns - summary.sent_ns) / 1e9
