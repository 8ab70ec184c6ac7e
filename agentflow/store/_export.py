"""A stored run — finished or partial — as a :class:`FleetResult`, and as the
``agentflow.report/2`` JSON report (``agentflow report --store PATH RUN_ID``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentflow.store._durable import _active_wall_s, _stored_retries
from agentflow.store._protocol import Store
from agentflow.store._records import StoredRun
from agentflow.store._resume import stored_result

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow._session import SessionResult

__all__ = ["export_report", "load_result"]


def result_of(run: StoredRun) -> FleetResult:
    """The run as a :class:`FleetResult`: every session as stored (those that had not
    ended show as ``cancelled``), every time on the first attempt's clock."""
    from agentflow._fleet import FleetResult

    sessions = [stored_result(run, s) for s in run.sessions]
    return FleetResult(
        sessions=sessions,
        wall_s=_active_wall_s(run),
        peak_in_flight=_peak(sessions),
        retries=_stored_retries(run),
        run_id=run.run_id,
    )


def _peak(sessions: list[SessionResult]) -> int:
    """The most recorded turns whose request was streaming at once (sent → end): the
    run's peak in flight as its record shows it — failed attempts, not recorded, left
    out, so at most the live figure."""
    edges = sorted(
        edge
        for s in sessions
        for t in s.turns
        for edge in ((t.trace.sent_ns, 1), (t.trace.end_ns, -1))
    )  # an end sorts before a start at the same instant: back to back is not overlap
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


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
    ``status`` of the run and its ``attempts`` (1 + the times it was resumed).

    Raises:
        RunNotFound: no such run.
    """
    from agentflow.demo.summary import build_report

    await store.open()
    run = await store.load(run_id)
    result = result_of(run)
    info: dict[str, Any] = dict(run.config or {})
    info.update(run_id=run.run_id, status=run.status, attempts=len(run.attempts))
    start = run.attempts[0].clock_ns if run.attempts else None
    return build_report(result, run=info, start_ns=start)
