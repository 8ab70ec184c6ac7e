"""``fleet.errors.callback`` of stats made from a result: a result keeps its callbacks'
failures (``callback_errors``), not the error events they made, so without the run's
``RunJournal`` the count is ``null`` when a callback failed — it used to read 0 beside a
non-zero ``callback_errors``. Real fleets on the in-process simulator, in virtual time."""

from __future__ import annotations

from typing import Any

from agentflow import Event, Fleet, FleetResult, TurnEndEvent
from agentflow.bench import SessionTemplate, SimTarget, Workload
from agentflow.bench._session import BenchRun, BenchSession
from agentflow.embedded import run_virtual
from agentflow.stats import FleetStats, RunJournal

TINY = Workload(
    name="tiny",
    templates=(SessionTemplate(name="req", turns=2, prompt_tokens=8, output_tokens=4),),
)


def fails_on_turn_end(event: Event) -> None:
    """A user's callback with a bug: it raises on every turn's end."""
    if isinstance(event, TurnEndEvent):
        raise ValueError("oops")


def _run(*callbacks: Any) -> tuple[FleetStats, RunJournal, FleetResult]:
    async def main() -> tuple[FleetStats, RunJournal, FleetResult]:
        scripts = [TINY.sample(i, arrival_s=0.0) for i in range(2)]
        target = SimTarget(profile="cpu-tiny")
        live, journal = FleetStats(), RunJournal(clock=target.clock())
        async with target.open(scripts, 0) as transport:
            fleet = Fleet(transport, callbacks=[live, journal, *callbacks], clock=target.clock())
            run = BenchRun(model="cpu-tiny", params={}, t0=0.0)
            result = await fleet.run([BenchSession(s, run) for s in scripts])
        return live, journal, result

    return run_virtual(main())


def test_a_failed_callback_is_unknown_without_the_journal() -> None:
    live, journal, result = _run(fails_on_turn_end)
    assert len(result.callback_errors) == 4
    assert live.report()["fleet"]["errors"]["callback"] == 4
    fleet = FleetStats.from_result(result).report()["fleet"]
    assert fleet["errors"]["callback"] is None and fleet["callback_errors"] == 4
    with_journal = FleetStats.from_result(result, journal=journal).report()["fleet"]
    assert with_journal["errors"]["callback"] == 4
    # merged with stats that saw theirs, it stays unknown (else a partial sum)
    merged = FleetStats.from_result(result)
    merged.merge(live)
    assert merged.report()["fleet"]["errors"]["callback"] is None


def test_no_failed_callback_is_an_exact_zero() -> None:
    _, _, result = _run()
    assert FleetStats.from_result(result).report()["fleet"]["errors"]["callback"] == 0
