"""What a benchmark runs: :class:`BenchConfig` (workload or scripts, levels or a
:class:`Sweep`, duration, warm-up, repeats, SLOs), checked when built, and the levels it
yields in order (:meth:`BenchConfig.level_loads`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.bench._level import Saturation
from agentflow.bench._load import Arrival, Load
from agentflow.bench._script import SessionScript
from agentflow.bench._workload_spec import Workload
from agentflow.stats import SLO
from agentflow.typing import Callback

__all__ = ["BenchConfig", "Sweep"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """Levels that grow until the server is over-saturated.

    Attributes:
        start: the first level's rate (sessions/s) or concurrency.
        factor: each next level is this many times the last (> 1).
        max_levels: the most levels to run.
        stop_after: stop after this many over-saturated levels in a row.
        min_gain: for concurrency levels: a level whose output tok/s grew by less
            than this fraction of its load's growth over the previous level's (0.25:
            a quarter of linear scaling — 16 sessions after 8 need 25 % more output), while
            its TTFT p50 grew, is over-saturated (a throughput plateau).
    """

    start: float
    factor: float = 1.5
    max_levels: int = 12
    stop_after: int = 1
    min_gain: float = 0.25

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_gain) and self.min_gain >= 0):
            raise ConfigError(f"sweep min_gain must be ≥ 0, got {self.min_gain!r}")
        if not (math.isfinite(self.start) and self.start > 0):
            raise ConfigError(f"sweep start must be > 0, got {self.start!r}")
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ConfigError(f"sweep factor must be > 1, got {self.factor!r}")
        check_count(self.max_levels, "Sweep.max_levels")
        check_count(self.stop_after, "Sweep.stop_after")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """What a benchmark runs.

    Attributes:
        workload: the sessions (sampled per level; or ``scripts`` instead).
        levels: the load levels, in order (with ``sweep``: ignored).
        sweep: grow the load from ``sweep.start`` until over-saturated; its levels are
            rates when ``concurrency_sweep`` is false, concurrencies otherwise.
        concurrency_sweep: sweep fixed live sessions instead of arrival rates.
        arrival: spacing of open-loop arrivals: ``"poisson"`` or ``"constant"``.
        duration_s: each level's length (no session starts and no turn is sent after
            it; turns in flight finish); ``None``: until every session ended.
        warmup_s: the first seconds of each level, left out of its figures.
        max_sessions: the most sessions a level starts.
        drain_s: how long a level's turns in flight may run past its end.
        seed: fixes the sessions, arrivals and (on the simulator) the outputs; repeat
            ``r`` uses ``seed + r``.
        repeats: runs per level (≥ 2 gives confidence intervals).
        slos: goodput is counted against these.
        saturation: when a level counts as over-saturated.
        model: the model name (default: the target's).
        max_in_flight: the fleet's ``max_concurrency`` — keep it above the server's
            batch so the server, not the client, is what saturates.
        params: body fields every request carries (``ignore_eos`` is added when the
            workload asks for it).
        scripts: run these sessions at every level instead of sampling ``workload``
            (a trace replay's): levels are then replay speeds (``Load(scale=…)``, a sweep
            grows the speed: their arrivals, not their tool and think gaps; for both,
            build them with :func:`~agentflow.bench.trace_scripts`'s ``time_scale``) or
            concurrencies.
        callbacks: more fleet callbacks for every level run (e.g. a
            :class:`~agentflow.bench.TraceRecorder`, to record the run as a trace).
        source: what the sessions came from, for the report's ``run`` section (a
            trace replay: its file, format and time scale).
    """

    workload: Workload | None = None
    levels: tuple[Load, ...] = ()
    sweep: Sweep | None = None
    concurrency_sweep: bool = False
    arrival: Arrival = "poisson"
    duration_s: float | None = 60.0
    warmup_s: float = 0.0
    max_sessions: int | None = None
    drain_s: float = 60.0
    seed: int = 0
    repeats: int = 1
    slos: tuple[SLO, ...] = ()
    saturation: Saturation = field(default_factory=Saturation)
    model: str | None = None
    max_in_flight: int = 100_000
    params: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0})
    scripts: tuple[SessionScript, ...] | None = None
    callbacks: tuple[Callback, ...] = ()
    source: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.workload is None and self.scripts is None:
            raise ConfigError("bench: give a workload or scripts")
        if not self.levels and self.sweep is None:
            raise ConfigError("bench: give levels (--rate/--concurrency) or a sweep")
        check_count(self.repeats, "bench: repeats")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"bench: duration must be > 0 s, got {self.duration_s!r}")
        if not self.warmup_s >= 0 or (
            self.duration_s is not None and self.warmup_s >= self.duration_s
        ):
            raise ConfigError(
                f"bench: warm-up must be ≥ 0 s and shorter than the duration, got {self.warmup_s!r}"
            )
        check_count(self.max_sessions, "bench: max_sessions (--sessions)", none="no limit")
        check_count(self.max_in_flight, "bench: max_in_flight")
        if self.arrival not in ("poisson", "constant"):
            raise ConfigError(f"bench: arrival must be poisson or constant, got {self.arrival!r}")
        for load in self.levels:
            if self.scripts is not None and load.rate is not None:
                raise ConfigError(
                    f"bench: {load.label}: scripts bring their own arrivals; give replay "
                    "speeds (Load(scale=…)) or concurrencies"
                )
            if self.scripts is None and load.scale is not None:
                raise ConfigError(f"bench: {load.label}: a replay speed needs scripts")

    def level_loads(self) -> Iterator[Load]:
        """The levels to run, in order (a sweep's, endless until ``max_levels``): rates
        for a workload, replay speeds for ``scripts``, or concurrencies — each at least
        one more than the last, so rounding never runs one level twice (a repeat would
        look like a throughput plateau)."""
        if self.sweep is None:
            yield from self.levels
            return
        value = self.sweep.start
        last = 0
        for _ in range(self.sweep.max_levels):
            if self.concurrency_sweep:
                last = max(last + 1, round(value))
                yield Load(concurrency=last)
            elif self.scripts is not None:
                yield Load(scale=value)
            else:
                yield Load(rate=value, arrival=self.arrival)
            value *= self.sweep.factor
