"""A level counts the retries of the turns in its window, and only those: a warm-up
turn's retry used to be counted too, and made a row (``agents[]``, ``per_agent``) of a
session with no turn in the window — 0 turns, 0 tokens, pulling the per-agent minima and
means down."""

from __future__ import annotations

from agentflow import Fleet, ServerError, TurnTrace
from agentflow.bench import SessionTemplate, SimTarget, Workload
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.bench._load import Load, plan_sessions
from agentflow.embedded import run_virtual
from agentflow.sched import RetryPolicy
from agentflow.transport import ChatRequest
from agentflow.typing import Clock, DeltaSink, Transport

WORKLOAD = Workload(
    name="w",
    templates=(
        SessionTemplate(
            name="agent", turns=2, prompt_tokens=64, output_tokens=20, tool_latency_s=0.1
        ),
    ),
)


class _FailOnce:
    """Fails the very first request (a warm-up session's, at 0 s) and the first one sent
    at or after ``at_ns`` (a session's in the window) with a 503; the simulator answers
    every other one."""

    def __init__(self, inner: Transport, clock: Clock, at_ns: int) -> None:
        self.inner, self.clock, self.at_ns = inner, clock, at_ns
        self.sent = 0
        self.failed_late = False

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        self.sent += 1
        late = not self.failed_late and self.clock() >= self.at_ns
        if self.sent == 1 or late:
            self.failed_late = self.failed_late or late
            raise ServerError("503 from the test", status=503, endpoint=self.endpoint)
        return await self.inner.stream(request, sink)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _level() -> LevelResult:
    load = Load(rate=2.0, arrival="constant")
    scripts = plan_sessions(WORKLOAD, load, duration_s=4.0)
    target = SimTarget(profile="cpu-tiny")
    clock = target.clock()

    async def main() -> LevelResult:
        tap = LevelTap()
        async with target.open(scripts, 0) as transport:
            failing = _FailOnce(transport, clock, clock() + 2_000_000_000)
            fleet = Fleet(
                failing,
                callbacks=[tap],
                clock=clock,
                retry=RetryPolicy(jitter=False, backoff_s=0.05),
            )
            level = await run_level(
                fleet,
                tap,
                scripts,
                load=load,
                model="cpu-tiny",
                params={},
                duration_s=4.0,
                warmup_s=1.0,
                clock=clock,
            )
            assert failing.sent > 1 and failing.failed_late
            return level

    return run_virtual(main())


def test_a_warm_up_turns_retry_is_not_counted_nor_a_row() -> None:
    level = _level()
    report = level.report
    in_window = level.summary["sessions"]["in_window"]
    rows = report["agents"]
    assert in_window > 0 and report["fleet"]["agents"] == len(rows) == in_window
    assert all(r["turns"] > 0 for r in rows), [r for r in rows if not r["turns"]]
    assert report["per_agent"]["turns"]["min"] == 2
    # the window's own retry counts, on its session's row
    assert report["fleet"]["retries"] == 1
    assert sorted(r["retries"] for r in rows) == [0] * (len(rows) - 1) + [1]
