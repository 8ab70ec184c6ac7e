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
duration and a session limit; :func:`session_stream` gives a fixed-concurrency level's
scripts one at a time, as its slots free up, for as long as the level lasts.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.bench._dist import _finite
from agentflow.bench._spec import SessionScript, Workload

__all__ = [
    "Arrival",
    "CountedScripts",
    "Load",
    "SessionStream",
    "arrival_times",
    "plan_sessions",
    "replay_sessions",
    "session_stream",
]

#: How open-loop sessions are spaced: exponential gaps, or equal ones.
Arrival = Literal["poisson", "constant"]

#: Sessions :func:`plan_sessions` prepares for a fixed-concurrency run with a duration
#: and no session limit, per live session (they run back to back; the run ends at its
#: duration). A bench level draws its sessions from a :class:`SessionStream` instead, which
#: does not run out.
SESSIONS_PER_SLOT = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """One load level: a session arrival rate, a number of live sessions, or — for
    scripts that carry their own arrivals (a trace) — a replay speed.

    Attributes:
        rate: sessions per second (open loop).
        concurrency: sessions alive at once.
        scale: replay the scripts' own ``arrival_s`` this many times faster (open loop:
            2.0 compresses the arrivals into half the time; the gaps between a session's
            turns stay as scripted).
        arrival: for ``rate``: ``"poisson"`` (exponential gaps) or ``"constant"``.

    Exactly one of ``rate``, ``concurrency`` and ``scale`` is set.
    """

    rate: float | None = None
    concurrency: int | None = None
    scale: float | None = None
    arrival: Arrival = "poisson"

    def __post_init__(self) -> None:
        given = [n for n in ("rate", "concurrency", "scale") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ConfigError(
                f"a load level needs exactly one of rate, concurrency and scale, got {given}"
            )
        if self.rate is not None:
            _finite("rate", self.rate, "a finite number > 0 sessions/s", lambda x: x > 0)
        if self.scale is not None:
            _finite("scale", self.scale, "a finite number > 0", lambda x: x > 0)
        if self.concurrency is not None:
            check_count(self.concurrency, "Load.concurrency")
        if self.arrival not in ("poisson", "constant"):
            raise ConfigError(f"arrival must be 'poisson' or 'constant', got {self.arrival!r}")

    @property
    def mode(self) -> Literal["rate", "concurrency", "scale"]:
        """``"rate"``, ``"concurrency"`` or ``"scale"``."""
        if self.rate is not None:
            return "rate"
        return "concurrency" if self.concurrency is not None else "scale"

    @property
    def value(self) -> float:
        """The rate (sessions/s), the concurrency, or the replay speed."""
        if self.rate is not None:
            return self.rate
        return float(self.concurrency) if self.concurrency is not None else float(self.scale or 0)

    @property
    def open_loop(self) -> bool:
        """Whether sessions arrive on a schedule (rate, scale) rather than into free slots."""
        return self.concurrency is None

    @property
    def label(self) -> str:
        """``"rate=4/s"``, ``"concurrency=16"`` or ``"scale=2x"``."""
        if self.rate is not None:
            return f"rate={self.rate:g}/s"
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        return f"scale={self.scale:g}x"


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
    _check_bounds(duration_s, max_sessions)
    if load.concurrency is not None:
        n = max_sessions or SESSIONS_PER_SLOT * load.concurrency
        return [workload.sample(i, seed=seed) for i in range(n)]
    if load.rate is None:
        raise ConfigError(f"{load.label}: a replay speed needs scripts, not a workload")
    out: list[SessionScript] = []
    for i, t in enumerate(arrival_times(load.rate, load.arrival, seed)):
        if duration_s is not None and t >= duration_s:
            break
        if max_sessions is not None and i >= max_sessions:
            break
        out.append(workload.sample(i, seed=seed, arrival_s=t))
    return out


class SessionStream:
    """A fixed-concurrency level's scripts, drawn one at a time as its live-session slots
    free up: script ``i`` is ``workload.sample(i, seed=seed)``, as :func:`plan_sessions`
    would give it. Endless unless ``limit`` is given, so a level holds its sessions for
    its whole duration however short they are, and holds only the live ones in memory.
    Each iteration starts again from script 0 (a target sizes itself on
    :meth:`preview`: iterating an endless stream does not end).

    Attributes:
        workload: what it samples.
        concurrency: the level's live sessions.
        seed: the run's seed.
        limit: the most scripts it gives (``None``: no end).
    """

    def __init__(
        self, workload: Workload, *, concurrency: int, seed: int = 0, limit: int | None = None
    ) -> None:
        self.workload = workload
        self.concurrency = concurrency
        self.seed = seed
        self.limit = limit

    def __iter__(self) -> Iterator[SessionScript]:
        indices = itertools.count() if self.limit is None else range(self.limit)
        for i in indices:
            yield self.workload.sample(i, seed=self.seed)

    def preview(self) -> list[SessionScript]:
        """Its first scripts (``SESSIONS_PER_SLOT`` per live session, at most ``limit``),
        without drawing them: what a target sizes itself on (the simulator, its answers'
        length)."""
        n = SESSIONS_PER_SLOT * self.concurrency
        if self.limit is not None:
            n = min(n, self.limit)
        return [self.workload.sample(i, seed=self.seed) for i in range(n)]


class CountedScripts:
    """An iterator over scripts that counts what it gave and knows when it ran out (a
    concurrency level's slots draw from one)."""

    def __init__(self, scripts: Iterable[SessionScript]) -> None:
        self._it = iter(scripts)
        self.drawn = 0
        self.exhausted = False

    def __iter__(self) -> CountedScripts:
        return self

    def __next__(self) -> SessionScript:
        try:
            script = next(self._it)
        except StopIteration:
            self.exhausted = True
            raise
        self.drawn += 1
        return script


def session_stream(
    workload: Workload,
    load: Load,
    *,
    duration_s: float | None,
    max_sessions: int | None = None,
    seed: int = 0,
) -> SessionStream:
    """A fixed-concurrency level's scripts (:class:`SessionStream`): endless with a
    duration, at most ``max_sessions``.

    Raises:
        ConfigError: ``load`` is not a concurrency, or neither a duration nor a session
            limit bounds the run.
    """
    if load.concurrency is None:
        raise ConfigError(f"{load.label}: a session stream is for a concurrency level")
    _check_bounds(duration_s, max_sessions)
    return SessionStream(workload, concurrency=load.concurrency, seed=seed, limit=max_sessions)


def _check_bounds(duration_s: float | None, max_sessions: int | None) -> None:
    if duration_s is None and max_sessions is None:
        raise ConfigError("a run needs a duration or a session limit (or both)")
    check_count(max_sessions, "max_sessions", none="no limit")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration must be a finite number of seconds > 0, got {duration_s!r}")


def replay_sessions(
    scripts: Sequence[SessionScript],
    load: Load,
    *,
    duration_s: float | None = None,
    max_sessions: int | None = None,
) -> list[SessionScript]:
    """Scripts that carry their own arrivals (a trace's), for one level.

    ``Load(scale=s)``: each ``arrival_s`` divided by ``s``; ``Load(concurrency=n)``:
    in order, into ``n`` live-session slots (their ``arrival_s`` ignored). Sessions
    arriving after ``duration_s`` are left out; at most ``max_sessions``.

    Raises:
        ConfigError: a ``rate`` level (scripts bring their own arrivals), or
            ``max_sessions`` < 1.
    """
    check_count(max_sessions, "max_sessions", none="no limit")
    if load.rate is not None:
        raise ConfigError(
            f"{load.label}: scripts bring their own arrivals; use a replay speed "
            "(Load(scale=…)) or a concurrency"
        )
    out: list[SessionScript] = []
    for s in sorted(scripts, key=lambda s: s.arrival_s):
        at = 0.0 if load.scale is None else s.arrival_s / load.scale
        if duration_s is not None and load.scale is not None and at >= duration_s:
            break
        out.append(s if at == s.arrival_s else msgspec.structs.replace(s, arrival_s=at))
        if max_sessions is not None and len(out) >= max_sessions:
            break
    return out
