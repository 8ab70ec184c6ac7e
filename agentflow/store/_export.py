"""A stored run — finished or partial — as a :class:`FleetResult`, and as the
``agentflow.report/2`` JSON report (``agentflow report --store PATH RUN_ID``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from agentflow.store._earlier import active_wall_s, stored_retries
from agentflow.store._peak import recorded_peak
from agentflow.store._protocol import Store
from agentflow.store._records import StoredRun
from agentflow.store._resume import stored_result

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow.stats import SLO, JournalEntry, RunJournal

__all__ = ["export_report", "load_result", "stored_tool_entries"]


def result_of(run: StoredRun) -> FleetResult:
    """The run as a :class:`FleetResult`: every session as stored (those that had not
    ended show as ``cancelled``), every time on the first attempt's clock."""
    from agentflow._fleet import FleetResult

    sessions = [stored_result(run, s) for s in run.sessions]
    return FleetResult(
        sessions=sessions,
        wall_s=active_wall_s(run),
        peak_in_flight=recorded_peak(sessions),
        retries=stored_retries(run),
        run_id=run.run_id,
    )


async def load_result(store: Store, run_id: str) -> FleetResult:
    """Read ``run_id`` from ``store`` as a :class:`FleetResult` (see :func:`result_of`).

    Raises:
        RunNotFound: no such run.
    """
    await store.open()
    return result_of(await store.load(run_id))


async def export_report(store: Store, run_id: str) -> dict[str, Any]:
    """The run's ``agentflow.report/2`` report (``docs/report-schema.md``), finished or
    partial: ``run`` holds the recorded run configuration, ``run_id``, the store's
    ``status`` of the run and its ``attempts`` (1 + the times it was resumed). A session
    with no recorded end is counted in ``fleet.unfinished``, not among the sessions that
    ended (``sessions``, ``failed``, ``statuses``); its row has no ``status``. The tools'
    figures (``tools``, ``fleet.tool_s``, ``tool_errors``, ``errors.tool``) come from the
    recorded tool results; a run recorded by ``agentflow demo`` also has its
    ``time_scale`` in ``run`` and goodput against its SLOs, as the demo's own report has.

    Raises:
        RunNotFound: no such run.
    """
    from agentflow.demo.summary import build_report

    await store.open()
    run = await store.load(run_id)
    result = result_of(run)
    info: dict[str, Any] = dict(run.config or {})
    slos = _demo_facts(info, result)
    info.update(run_id=run.run_id, status=run.status, attempts=len(run.attempts))
    start = run.attempts[0].clock_ns if run.attempts else None
    # A session with no stored end (the run is still running, or was killed) has not
    # ended: not ``cancelled``, as ``result_of`` shows it (and resume re-runs it).
    unfinished = [s.session_id for s in run.sessions if s.status == "pending"]
    return build_report(
        result,
        run=info,
        start_ns=start,
        slos=slos,
        journal=_tool_journal(run),
        unfinished=unfinished,
    )


def _demo_facts(info: dict[str, Any], result: FleetResult) -> tuple[SLO, ...]:
    """For a run ``agentflow demo`` recorded (``run_config`` ``{"kind": "agentflow-demo",
    "demo": {...}}``): its SLOs, their labels and its time scale put in ``info`` where
    the demo's report has them. A recorded SLO this release cannot read is left out."""
    from agentflow.demo.summary import advertised_time_scale
    from agentflow.stats import SLO
    from agentflow.stats._slo import check_slos

    demo = info.get("demo") if info.get("kind") == "agentflow-demo" else None
    if not isinstance(demo, dict):
        return ()
    try:
        slos = tuple(SLO(**s) for s in demo.get("slos") or ())
        check_slos(slos)
    except (TypeError, ValueError):  # ConfigError included
        slos = ()
    info["slos"] = [s.label for s in slos]
    # As the demo's run measured it: the server's advertised scale, else the simulator
    # it started (no --base-url, not in virtual time) ran ``time_scale`` times slower.
    scale = demo.get("time_scale")
    own_sim = not demo.get("base_url") and not demo.get("virtual")
    fallback = (_time_scale(scale) if own_sim else None) or 1.0
    info["time_scale"] = advertised_time_scale(result) or fallback
    return slos


def _time_scale(value: object) -> float | None:
    """``value`` if a time scale can be it: a finite number > 0 (a stored config's JSON
    may hold a NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _tool_journal(run: StoredRun) -> RunJournal:
    """The recorded tool results as a :class:`RunJournal` on the first attempt's clock
    (:meth:`RunJournal.add_stored`); it saw no compaction (a store records no summary
    request)."""
    from agentflow.stats import RunJournal

    journal = RunJournal()
    journal.add_stored(run, to_attempt=0)
    return journal


def stored_tool_entries(run: StoredRun, to_attempt: int | None = None) -> list[JournalEntry]:
    """The recorded tool results of every attempt as a :class:`RunJournal`'s entries —
    what the live report's journal noted of each call: a ``tool`` entry (name, outcome,
    duration), and for a call that failed, the ``error`` entry (``where="tool"``) its
    ``ErrorEvent`` gave (there used to be none: ``fleet.errors.tool`` read 0 beside
    ``tool_errors`` 1). A call ended at about its turn's end plus its duration, on the
    clock of attempt ``to_attempt`` (default the first, as every time of the exported
    result; :meth:`RunJournal.add_stored`, on the resumed attempt's)."""
    from agentflow.stats import JournalEntry

    entries: list[JournalEntry] = []
    for s in run.sessions:
        for t in s.turns:
            end = t.trace.end_ns + run.clock_offset(t.attempt, to_attempt)
            for r in t.tool_results.values():
                entries.append(
                    JournalEntry(
                        end,
                        "tool",
                        s.agent,
                        s.session_id,
                        t.turn,
                        where=r.name,
                        duration_s=r.duration_s,
                        is_error=r.is_error,
                    )
                )
                if r.is_error:
                    at = end + round(r.duration_s * 1e9)
                    entries.append(JournalEntry(at, "error", s.agent, s.session_id, t.turn, "tool"))
    return entries
