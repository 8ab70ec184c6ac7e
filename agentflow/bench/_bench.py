"""A benchmark: load levels run one after another on one Fleet, each measured alone.

:func:`run_bench` takes a :class:`BenchConfig` (workload, levels or a sweep, duration,
warm-up, repeats, SLOs) and a target — :class:`SimTarget` (the embedded simulator in
virtual time, the default) or :class:`HTTPTarget` (any OpenAI-compatible server) —
and returns the bench report (``agentflow.bench/1``, ``docs/bench.md``): one entry per
level with its figures, their 95 % confidence intervals over the repeats, each
repeat's ``agentflow.report/2`` report, and the saturation knee.

A sweep goes from low load to high and stops once a level is over-saturated (its time
to first token or its backlog keeps growing, :class:`~agentflow.bench.Saturation`;
for fixed-concurrency levels, also when throughput stops growing while latency does).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from agentflow._errors import ConfigError
from agentflow._fleet import Fleet
from agentflow.bench._level import LevelResult, LevelTap, Saturation, run_level
from agentflow.bench._load import Arrival, Load, plan_sessions, replay_sessions
from agentflow.bench._spec import SessionScript, Workload
from agentflow.stats import SLO
from agentflow.typing import Callback, Clock, Transport

__all__ = [
    "BENCH_SCHEMA_VERSION",
    "BenchConfig",
    "HTTPTarget",
    "SimTarget",
    "Sweep",
    "Target",
    "confidence_interval",
    "run_bench",
]

#: The ``schema_version`` of bench reports.
BENCH_SCHEMA_VERSION = "agentflow.bench/1"

#: Figures that get a confidence interval over repeats: (key in the summary, sub-key).
_CI_FIGURES: tuple[tuple[str, str | None], ...] = (
    ("output_tps", None),
    ("req_per_s", None),
    ("achieved_rate", None),
    ("ttft_s", "p50"),
    ("ttft_s", "p99"),
    ("tpot_s", "p50"),
    ("tpot_s", "p99"),
    ("decode_tps_per_agent", "p50"),
    ("decode_tps_per_agent", "p99"),
    ("cache_hit_rate", None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """Levels that grow until the server is over-saturated.

    Attributes:
        start: the first level's rate (sessions/s) or concurrency.
        factor: each next level is this many times the last (> 1).
        max_levels: the most levels to run.
        stop_after: stop after this many over-saturated levels in a row.
        min_gain: for concurrency levels: a level whose output tok/s grew by less
            than this fraction over the previous one's, while its TTFT p50 grew, is
            over-saturated (a throughput plateau).
    """

    start: float
    factor: float = 1.5
    max_levels: int = 12
    stop_after: int = 1
    min_gain: float = 0.05

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and self.start > 0):
            raise ConfigError(f"sweep start must be > 0, got {self.start!r}")
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ConfigError(f"sweep factor must be > 1, got {self.factor!r}")
        if self.max_levels < 1 or self.stop_after < 1:
            raise ConfigError("sweep max_levels and stop_after must be ≥ 1")


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
        if self.repeats < 1:
            raise ConfigError(f"bench: repeats must be ≥ 1, got {self.repeats!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"bench: duration must be > 0 s, got {self.duration_s!r}")
        if not self.warmup_s >= 0 or (
            self.duration_s is not None and self.warmup_s >= self.duration_s
        ):
            raise ConfigError(
                f"bench: warm-up must be ≥ 0 s and shorter than the duration, got {self.warmup_s!r}"
            )
        if self.max_in_flight < 1:
            raise ConfigError(f"bench: max_in_flight must be ≥ 1, got {self.max_in_flight!r}")
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
        for a workload, replay speeds for ``scripts``, or concurrencies."""
        if self.sweep is None:
            yield from self.levels
            return
        value = self.sweep.start
        for _ in range(self.sweep.max_levels):
            if self.concurrency_sweep:
                yield Load(concurrency=max(1, round(value)))
            elif self.scripts is not None:
                yield Load(scale=value)
            else:
                yield Load(rate=value, arrival=self.arrival)
            value *= self.sweep.factor


class Target(Protocol):
    """Where a bench sends its requests; opened once per level run."""

    @property
    def label(self) -> str:
        """For reports: what the target is."""
        ...

    async def model_name(self) -> str:
        """The model name to request when the config gives none."""
        ...

    @property
    def virtual(self) -> bool:
        """Whether runs go on virtual time (``VirtualTimeLoop``) rather than real time."""
        ...

    def clock(self) -> Clock:
        """The clock traces and the fleet use (nanoseconds)."""
        ...

    def open(
        self, scripts: Sequence[SessionScript], seed: int
    ) -> contextlib.AbstractAsyncContextManager[Transport]:
        """A transport for one level run of ``scripts``."""
        ...


@dataclass(kw_only=True)
class SimTarget:
    """The embedded simulator, in-process on virtual time: a fresh engine per level run
    (so levels do not share a cache or a backlog), answering with exactly
    ``max_tokens`` tokens (the workload's output lengths).

    Attributes:
        profile: the simulator's deployment profile (a name or a ``Profile``).
    """

    profile: Any = "qwen2.5-coder-32b"
    virtual: bool = True

    @property
    def label(self) -> str:
        """``sim://PROFILE (virtual time)``."""
        return f"sim://{self._profile().name} (in-process, virtual time)"

    async def model_name(self) -> str:
        """The profile's model."""
        return str(self._profile().model)

    def _profile(self) -> Any:
        from agentflow.sim.profiles import get_profile

        return get_profile(self.profile) if isinstance(self.profile, str) else self.profile

    def clock(self) -> Clock:
        """The event loop's clock (virtual)."""
        from agentflow.embedded import loop_clock

        return loop_clock

    @contextlib.asynccontextmanager
    async def open(self, scripts: Sequence[SessionScript], seed: int) -> AsyncIterator[Transport]:
        """A fresh engine whose answers run to ``max_tokens``."""
        from agentflow.embedded import SimTransport
        from agentflow.sim import Engine
        from agentflow.sim.driver import EngineDriver
        from agentflow.sim.textgen import TextGenConfig

        longest = max((_longest_output(s) for s in scripts), default=1)
        textgen = TextGenConfig(tool_rounds=0, answer_tokens=(longest, longest))
        transport = SimTransport(EngineDriver(Engine(self._profile(), seed=seed, textgen=textgen)))
        try:
            yield transport
        finally:
            await transport.aclose()


def _longest_output(script: SessionScript) -> int:
    return max(
        max([t.max_tokens, *(_longest_output(s) for s in t.subagents)]) for t in script.turns
    )


@dataclass(kw_only=True)
class HTTPTarget:
    """An OpenAI-compatible server over HTTP (agentflow's ``HTTPTransport``).

    Attributes:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        api_key: sent as a bearer token (never printed or reported).
        model: the model name to request; ``None``: the one the server's ``/v1/models``
            lists (``"default"`` if it lists none or several).
        timeouts: time limits of each request (the transport's defaults if ``None``).
    """

    base_url: str
    model: str | None = None
    api_key: str | None = None
    timeouts: Any = None
    virtual: bool = False

    @property
    def label(self) -> str:
        """The base URL (credentials masked in reports)."""
        return self.base_url

    async def model_name(self) -> str:
        """``model``, or the model the server serves (asked once, 10 s at most)."""
        if self.model is None:
            from agentflow._errors import AgentflowError
            from agentflow.context import server_window

            self.model = "default"
            with contextlib.suppress(AgentflowError):
                found = await server_window(self.base_url, api_key=self.api_key, timeout_s=10.0)
                if found is not None and found.model:
                    self.model = found.model
        return self.model

    def clock(self) -> Clock:
        """``time.perf_counter_ns``, the transport's default."""
        import time

        return time.perf_counter_ns

    @contextlib.asynccontextmanager
    async def open(self, scripts: Sequence[SessionScript], seed: int) -> AsyncIterator[Transport]:
        """One transport (one connection pool) for the level run."""
        from agentflow.transport import Endpoint, HTTPTransport

        transport = HTTPTransport(
            Endpoint(base_url=self.base_url, api_key=self.api_key), timeouts=self.timeouts
        )
        async with transport:
            yield transport


# ---- statistics over repeats ----------------------------------------------------------

#: Two-sided 95 % Student-t quantiles by degrees of freedom (1–30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
    2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
    2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def confidence_interval(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean and two-sided 95 % confidence interval (Student's t) of repeated runs'
    figures: ``{"n", "mean", "stdev", "low", "high", "half_width"}``; with fewer than
    two values the interval is ``None``."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "stdev": None, "low": None, "high": None, "half_width": None}
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": 1, "mean": mean, "stdev": None, "low": None, "high": None, "half_width": None}
    sd = statistics.stdev(values)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    half = t * sd / math.sqrt(n)
    return {
        "n": n,
        "mean": mean,
        "stdev": sd,
        "low": mean - half,
        "high": mean + half,
        "half_width": half,
    }


def _figure(summary: Mapping[str, Any], key: str, sub: str | None) -> float | None:
    value = summary.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


# ---- the run -------------------------------------------------------------------------


def run_bench(
    config: BenchConfig,
    target: Target | None = None,
    *,
    on_level: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every level (on virtual time for a virtual target) and return the report.

    Args:
        config: what to run.
        target: where (default: :class:`SimTarget`).
        on_level: called with each level's entry as soon as it is measured.
    """
    chosen: Target = target if target is not None else SimTarget()
    if chosen.virtual:
        from agentflow.embedded import run_virtual

        return run_virtual(arun_bench(config, chosen, on_level=on_level))
    return asyncio.run(arun_bench(config, chosen, on_level=on_level))


async def arun_bench(
    config: BenchConfig,
    target: Target,
    *,
    on_level: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """:func:`run_bench` on the running loop (a virtual target needs a VirtualTimeLoop)."""
    model = config.model or await target.model_name()
    params = dict(config.params)
    if config.workload is not None and config.workload.ignore_eos:
        params.setdefault("ignore_eos", True)
    clock = target.clock()
    tap = LevelTap()
    levels: list[dict[str, Any]] = []
    over = 0
    stopped = "levels done"
    previous: dict[str, Any] | None = None
    for load in config.level_loads():
        runs: list[LevelResult] = []
        for r in range(config.repeats):
            seed = config.seed + r
            scripts = _scripts(config, load, seed)
            async with target.open(scripts, seed) as transport:
                fleet = Fleet(
                    transport,
                    max_concurrency=config.max_in_flight,
                    max_tool_concurrency=config.max_in_flight,
                    callbacks=[tap, *config.callbacks],
                    clock=clock,
                    prefix_warmup=False,
                )
                runs.append(
                    await run_level(
                        fleet,
                        tap,
                        scripts,
                        load=load,
                        model=model,
                        params=params,
                        duration_s=config.duration_s,
                        warmup_s=config.warmup_s,
                        drain_s=config.drain_s,
                        slos=config.slos,
                        clock=clock,
                        saturation=config.saturation,
                        run_info={"target": target.label, "model": model, "seed": seed},
                    )
                )
        entry = _level_entry(load, runs)
        _plateau(config, entry, previous)
        levels.append(entry)
        if on_level is not None:
            on_level(entry)
        previous = entry
        if entry["saturation"]["saturated"]:
            over += 1
            if config.sweep is not None and over >= config.sweep.stop_after:
                stopped = "over-saturated"
                break
        else:
            over = 0
    return _report(config, target, model, params, levels, stopped)


def _scripts(config: BenchConfig, load: Load, seed: int) -> list[SessionScript]:
    if config.scripts is not None:
        return replay_sessions(
            config.scripts, load, duration_s=config.duration_s, max_sessions=config.max_sessions
        )
    assert config.workload is not None
    return plan_sessions(
        config.workload,
        load,
        duration_s=config.duration_s,
        max_sessions=config.max_sessions,
        seed=seed,
    )


def _level_entry(load: Load, runs: list[LevelResult]) -> dict[str, Any]:
    """One level: the first run's summary, with each CI figure replaced by its mean over
    the repeats and its interval under ``ci95``; over-saturated when most runs were."""
    summaries = [r.summary for r in runs]
    entry = dict(summaries[0])
    ci: dict[str, Any] = {}
    for key, sub in _CI_FIGURES:
        values = [v for s in summaries if (v := _figure(s, key, sub)) is not None]
        interval = confidence_interval(values)
        ci[key if sub is None else f"{key}.{sub}"] = interval
        if len(values) > 1:
            if sub is None:
                entry[key] = interval["mean"]
            else:
                entry[key] = {**entry[key], sub: interval["mean"]}
    saturated = sum(s["saturation"]["saturated"] for s in summaries) * 2 > len(summaries)
    entry["saturation"] = {**summaries[0]["saturation"], "saturated": saturated}
    entry["ci95"] = ci
    entry["repeats"] = [
        {
            "seed_offset": i,
            **{k: v for k, v in s.items() if k != "report"},
            "report": _slim(r.report),
        }
        for i, (s, r) in enumerate(zip(summaries, runs, strict=True))
    ]
    return entry


def _slim(report: dict[str, Any]) -> dict[str, Any]:
    """A level's ``agentflow.report/2`` with its one-row-per-session table emptied (a
    level can run thousands of sessions; ``per_agent`` keeps their distributions)."""
    return {**report, "agents": []}


def _plateau(config: BenchConfig, entry: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """Fixed-concurrency levels: a throughput plateau with rising latency is saturation."""
    if previous is None or entry["load"]["mode"] != "concurrency":
        return
    min_gain = config.sweep.min_gain if config.sweep is not None else 0.05
    tps, prev_tps = entry.get("output_tps"), previous.get("output_tps")
    ttft, prev_ttft = _figure(entry, "ttft_s", "p50"), _figure(previous, "ttft_s", "p50")
    if not tps or not prev_tps or ttft is None or prev_ttft is None:
        return
    gain = tps / prev_tps - 1
    if gain < min_gain and ttft > prev_ttft:
        sat = entry["saturation"]
        sat["saturated"] = True
        sat["reasons"] = [
            *sat.get("reasons", []),
            f"output tok/s grew {gain:+.1%} over the previous level while TTFT p50 rose",
        ]


def _report(
    config: BenchConfig,
    target: Target,
    model: str,
    params: Mapping[str, Any],
    levels: list[dict[str, Any]],
    stopped: str,
) -> dict[str, Any]:
    from agentflow._redact import redact_data
    from agentflow._version import __version__

    knee = None
    for entry in levels:
        if entry["saturation"]["saturated"]:
            break
        knee = entry["load"]
    run: dict[str, Any] = {
        "target": target.label,
        "model": model,
        "workload": (
            msgspec.to_builtins(config.workload) if config.workload is not None else "scripts"
        ),
        "duration_s": config.duration_s,
        "warmup_s": config.warmup_s,
        "max_sessions": config.max_sessions,
        "seed": config.seed,
        "repeats": config.repeats,
        "arrival": config.arrival,
        "sweep": None
        if config.sweep is None
        else {
            "start": config.sweep.start,
            "factor": config.sweep.factor,
            "max_levels": config.sweep.max_levels,
            "stop_after": config.sweep.stop_after,
            "concurrency": config.concurrency_sweep,
        },
        "slos": [{"name": s.label, "bounds": s.bounds()} for s in config.slos],
        "saturation_rule": {
            "ttft_growth": config.saturation.ttft_growth,
            "min_rise_s": config.saturation.min_rise_s,
            "backlog_growth": config.saturation.backlog_growth,
        },
        "params": dict(params),
        "max_in_flight": config.max_in_flight,
    }
    if config.source is not None:
        run["source"] = dict(config.source)
    report = {
        "schema_version": BENCH_SCHEMA_VERSION,
        "generator": {"name": "agentflow", "version": __version__},
        "run": run,
        "levels": levels,
        "knee": knee,
        "stopped": stopped,
    }
    return redact_data(report)  # type: ignore[no-any-return]
