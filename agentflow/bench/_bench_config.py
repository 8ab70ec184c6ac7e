"""What a benchmark runs: :class:`BenchConfig` (workload or scripts, levels or a
:class:`Sweep`, duration, warm-up, repeats, SLOs), checked when built, and the levels it
yields in order (:meth:`BenchConfig.level_loads`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.bench._dist import _finite
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
        _finite("sweep min_gain", self.min_gain, "a finite number ≥ 0", lambda x: x >= 0)
        _finite("sweep start", self.start, "a finite number > 0", lambda x: x > 0)
        _finite("sweep factor", self.factor, "a finite number > 1", lambda x: x > 1)
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
        self._check_kinds()
        check_count(self.repeats, "bench: repeats")
        if self.duration_s is not None:
            check_seconds(self.duration_s, "bench: duration_s", 0, MAX_TIMEOUT_S)
            if not self.duration_s > 0:
                raise ConfigError(f"bench: duration must be > 0 s, got {self.duration_s!r}")
        check_seconds(self.warmup_s, "bench: warmup_s", 0, MAX_TIMEOUT_S)
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise ConfigError(
                f"bench: warm-up must be ≥ 0 s and shorter than the duration, got {self.warmup_s!r}"
            )
        # A negative or NaN drain cancelled every level at its end: each was reported
        # over-saturated ("turns still in flight"), and a sweep stopped at its first.
        check_seconds(self.drain_s, "bench: drain_s", 0, MAX_TIMEOUT_S)
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

    def _check_kinds(self) -> None:
        """Each part of its kind: a wrong one (a dict for ``saturation``, a name for
        ``workload``, strings for ``slos``, numbers for ``levels``) used to fail with an
        AttributeError only after a level's turns had run."""
        parts: tuple[tuple[str, object, type], ...] = (
            ("workload", self.workload, Workload),
            ("sweep", self.sweep, Sweep),
        )
        for name, value, kind in parts:
            if value is not None and not isinstance(value, kind):
                hint = " (a named one: get_workload(name))" if name == "workload" else ""
                raise ConfigError(
                    f"bench: {name} must be a {kind.__name__} or None{hint}, got {value!r:.80}"
                )
        if not isinstance(self.saturation, Saturation):
            raise ConfigError(
                f"bench: saturation must be a Saturation, got {self.saturation!r:.80}"
            )
        items: tuple[tuple[str, object, type, str], ...] = (
            ("levels", self.levels, Load, "a Load"),
            ("slos", self.slos, SLO, "an SLO"),
        )
        for name, value, kind, one in items:
            if not isinstance(value, tuple | list):
                raise ConfigError(
                    f"bench: {name} must be a tuple of {kind.__name__}, got {value!r:.80}"
                )
            for i, item in enumerate(value):
                if not isinstance(item, kind):
                    raise ConfigError(f"bench: {name}[{i}] must be {one}, got {item!r:.80}")

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
