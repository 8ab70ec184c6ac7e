"""Load patterns: when sessions arrive, and how many live at once.

Two kinds of load, as load generators name them:

- **open loop** (``Load.rate``): sessions arrive at a rate — Poisson (exponential
  gaps) or constant — whatever the server does; a slow server makes a backlog, not a
  slower client. Arrival times are drawn up front from the seed, as vLLM's
  ``bench serve`` does, so the offered load is exact and the same on every run.
- **fixed live sessions** (``Load.concurrency``): N sessions alive at all times; when
  one ends the next starts (closed loop at the session level — within a session,
  turns follow its script's tool latencies and think times).

:func:`plan_sessions` turns a workload and a load into the run's scripts, bounded by a
duration and a session limit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from agentflow._errors import ConfigError
from agentflow.bench._spec import SessionScript, Workload

__all__ = ["Arrival", "Load", "arrival_times", "plan_sessions"]

#: How open-loop sessions are spaced: exponential gaps, or equal ones.
Arrival = Literal["poisson", "constant"]

#: Sessions prepared for a fixed-concurrency run with a duration and no session
#: limit, per live session (they run back to back; the run ends at its duration).
SESSIONS_PER_SLOT = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """One load level: a session arrival rate, or a number of live sessions.

    Attributes:
        rate: sessions per second (open loop); ``None`` for a concurrency level.
        concurrency: sessions alive at once; ``None`` for a rate level.
        arrival: ``"poisson"`` (exponential gaps) or ``"constant"`` (equal gaps).
    """

    rate: float | None = None
    concurrency: int | None = None
    arrival: Arrival = "poisson"

    def __post_init__(self) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise ConfigError("a load level needs exactly one of rate and concurrency")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(f"rate must be a finite number > 0 sessions/s, got {self.rate!r}")
        if self.concurrency is not None and (
            not isinstance(self.concurrency, int) or self.concurrency < 1
        ):
            raise ConfigError(f"concurrency must be an int ≥ 1, got {self.concurrency!r}")
        if self.arrival not in ("poisson", "constant"):
            raise ConfigError(f"arrival must be 'poisson' or 'constant', got {self.arrival!r}")

    @property
    def mode(self) -> Literal["rate", "concurrency"]:
        """``"rate"`` or ``"concurrency"``."""
        return "rate" if self.rate is not None else "concurrency"

    @property
    def value(self) -> float:
        """The rate (sessions/s) or the concurrency."""
        return self.rate if self.rate is not None else float(self.concurrency or 0)

    @property
    def label(self) -> str:
        """``"rate=4/s"`` or ``"concurrency=16"``."""
        if self.rate is not None:
            return f"rate={self.rate:g}/s"
        return f"concurrency={self.concurrency}"


def arrival_times(rate: float, arrival: Arrival, seed: int | str) -> Iterator[float]:
    """Offsets (seconds from the start) of open-loop arrivals at ``rate`` sessions/s.

    Poisson: exponential gaps of mean ``1/rate`` from a generator seeded with ``seed``;
    the first arrival is at 0. Constant: ``k / rate``. Endless: the caller stops.
    """
    if arrival == "constant":
        k = 0
        while True:
            yield k / rate
            k += 1
    rng = random.Random(f"arrivals|{seed}")
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(rate)


def plan_sessions(
    workload: Workload,
    load: Load,
    *,
    duration_s: float | None,
    max_sessions: int | None = None,
    seed: int = 0,
) -> list[SessionScript]:
    """The scripts of one run: ``workload`` sampled at the arrivals ``load`` gives.

    Open loop: every arrival before ``duration_s`` (at most ``max_sessions``).
    Fixed concurrency: ``max_sessions`` scripts (default ``SESSIONS_PER_SLOT`` per live
    session), all arriving at 0; the run's live-session slots start them in order.

    Raises:
        ConfigError: neither a duration nor a session limit bounds the run.
    """
    if duration_s is None and max_sessions is None:
        raise ConfigError("a run needs a duration or a session limit (or both)")
    if max_sessions is not None and max_sessions < 1:
        raise ConfigError(f"max_sessions must be ≥ 1, got {max_sessions!r}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration must be a finite number of seconds > 0, got {duration_s!r}")
    if load.concurrency is not None:
        n = max_sessions or SESSIONS_PER_SLOT * load.concurrency
        return [workload.sample(i, seed=seed) for i in range(n)]
    assert load.rate is not None
    out: list[SessionScript] = []
    for i, t in enumerate(arrival_times(load.rate, load.arrival, seed)):
        if duration_s is not None and t >= duration_s:
            break
        if max_sessions is not None and i >= max_sessions:
            break
        out.append(workload.sample(i, seed=seed, arrival_s=t))
    return out
