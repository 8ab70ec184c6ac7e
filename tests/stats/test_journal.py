"""FleetStats.from_result(result, journal=RunJournal(clock)) gives what subscribing gives:
tool durations and per-tool figures, and every retry and error placed in time — also a
session that failed before finishing a turn and the retries of a turn that never
finished, which a result alone keeps no time for."""

from __future__ import annotations

from agentflow import Agent, Fleet, HTTPTransport, Replica, RetryPolicy
from agentflow.embedded import loop_clock
from agentflow.report import Run, make_figures
from agentflow.stats import FleetStats, RunJournal
from tests.sched.conftest import Faulty, RecordingSim
from tests.stats.test_end_to_end import run_fleet
from tests.stats.test_merge import assert_same
from tests.stats.test_report_schema import validate


def test_with_its_journal_a_result_reports_what_subscribing_does() -> None:
    """24 sessions with a tool that takes (virtual) time: the whole report is the same,
    tools and their durations included."""
    live = FleetStats(per="session", clock=loop_clock)
    journal = RunJournal(loop_clock)
    result = run_fleet(live, journal)
    after = FleetStats.from_result(result, journal=journal, per="session")
    want, got = live.report(), after.report()
    validate(got)
    assert_same(got, want)
    naps = got["tools"]["nap"]
    assert naps["calls"] > 0 and naps["duration_s"]["max"] > 0
    assert got["fleet"]["tool_s"] > 0
    assert sum(t["calls"] for t in got["tools"].values()) == got["fleet"]["tool_calls"]
    assert len(journal.entries) == got["fleet"]["tool_calls"]  # no errors, no retries
    # Without it, the tool figures are what the result keeps: the calls, no outcomes.
    bare = FleetStats.from_result(result, per="session").report()
    assert bare["tools"] == {} and bare["fleet"]["tool_s"] is None
    assert bare["fleet"]["tool_calls"] == got["fleet"]["tool_calls"]


def test_without_its_journal_a_results_tool_outcomes_are_null_not_zero() -> None:
    """A result keeps no tool outcome or duration: ``tool_errors``, ``tool_s`` and
    ``errors.tool`` are null (not measured), on the fleet and on every row — they were
    0, a measured "no tool failed". Merged with stats that saw them, still null (a
    partial sum); the calls, which the traces keep, are counted."""
    live = FleetStats(per="session", clock=loop_clock)
    result = run_fleet(live, RunJournal(loop_clock))
    bare = FleetStats.from_result(result, per="session")
    report = bare.report()
    validate(report)
    fleet = report["fleet"]
    assert fleet["tool_calls"] > 0
    assert (fleet["tool_errors"], fleet["tool_s"], fleet["errors"]["tool"]) == (None,) * 3
    assert fleet["errors"]["session"] == 0
    assert all(r["tool_errors"] is None and r["tool_s"] is None for r in report["agents"])
    assert sum(r["tool_calls"] for r in report["agents"]) == fleet["tool_calls"]
    live.merge(bare)
    merged = live.report()
    validate(merged)
    assert merged["fleet"]["tool_s"] is None and merged["fleet"]["errors"]["tool"] is None
    # stats that saw every outcome keep their numbers when merged
    total = FleetStats(per="session", clock=loop_clock)
    total.merge(FleetStats.from_result(result, journal=RunJournal(loop_clock), per="session"))
    assert total.report()["fleet"]["tool_errors"] == 0


AGENT = Agent(name="a", model="m", params={"max_tokens": 16})
SESSIONS = 5


class Waits:
    async def __call__(self, seconds: float) -> None:
        return None


async def test_sessions_failing_before_any_turn_are_placed_in_time() -> None:
    """Every attempt is reset mid-stream on the simulator (loopback): each session fails
    at its first turn after 3 attempts. A result keeps no time for the retries (only each
    session's end: its failure); with the journal every retry is in the time series too."""
    fault = "reset_mid_stream; after=2"
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        journal = RunJournal()
        fleet = Fleet(
            Replica(transport=Faulty(http, fault, fault, fault), breaker_threshold=1000),
            retry=RetryPolicy(max_attempts=3, backoff_s=0.1, jitter=False),
            sleep=Waits(),
            callbacks=[journal],
        )
        result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    assert len(result.failed) == SESSIONS and not any(s.turns for s in result.sessions)
    assert result.retries == 2 * SESSIONS

    bare = FleetStats.from_result(result, per="session").report()
    placed = FleetStats.from_result(result, journal=journal, per="session").report()
    for r in (bare, placed):
        validate(r)
        assert r["fleet"]["retries"] == 2 * SESSIONS
        assert r["fleet"]["errors"]["session"] == SESSIONS
    assert sum(bare["throughput"]["retries"]) == 0
    assert sum(bare["throughput"]["errors"]) == SESSIONS  # at each session's end_ns
    tp = placed["throughput"]
    assert sum(tp["retries"]) == 2 * SESSIONS and sum(tp["errors"]) == SESSIONS
    assert len(tp["t_s"]) == len(tp["retries"]) > 0
    assert [row["retries"] for row in placed["agents"]] == [2] * SESSIONS

    # agentflow report draws them, and no longer says some are not in time.
    captions = {
        label: {f.key: f for f in make_figures([Run(label, r)])}["errors_retries"].caption
        for label, r in (("bare", bare), ("placed", placed))
    }
    assert f"{2 * SESSIONS:,} of them not in time" in captions["bare"]
    assert "not in time" not in captions["placed"]
    assert f"{2 * SESSIONS} retries, {SESSIONS} errors" in captions["placed"]


def test_a_finished_turns_retry_is_placed_when_the_journal_saw_it() -> None:
    """Attempt 0 failed at 1 s before any byte (no trace); the back-off waited 30 s and
    attempt 1 answered. The journal noted the retry at 1 s: the report places it there,
    not at the answering attempt's send 30 s later (all the result knows). Counted once."""
    from agentflow import FleetResult, SessionResult, TransportError, turn_metrics
    from agentflow._session_types import TurnRecord
    from agentflow.sched import FailedAttempt
    from agentflow.stats._journal import JournalEntry
    from tests.stats.traces import MS, trace

    tr = trace(sent_ms=31_000, chunks_ms=[31_100, 31_200], end_ms=31_300, completion=2)
    failed = FailedAttempt(
        attempt=0, replica="r", error=TransportError("503"), trace=None, wait_s=30.0
    )
    turn = TurnRecord(
        index=0, metrics=turn_metrics(tr, ready_ns=0), trace=tr, failed_attempts=(failed,)
    )
    session = SessionResult(
        session_id="s", agent="a", status="completed", final_output="x", messages=[], turns=[turn]
    )
    result = FleetResult(sessions=[session], wall_s=31.3, peak_in_flight=1, retries=1)
    journal = RunJournal(clock=lambda: 0)
    journal.entries.append(JournalEntry(1_000 * MS, "retry", "a", "s", 0))
    report = FleetStats.from_result(result, journal=journal, start_ns=0).report()
    tp = report["throughput"]
    assert [t for t, n in zip(tp["t_s"], tp["retries"], strict=True) if n] == [1.0]
    assert sum(tp["retries"]) == 1 == report["fleet"]["retries"]
    assert [row["retries"] for row in report["agents"]] == [1]
