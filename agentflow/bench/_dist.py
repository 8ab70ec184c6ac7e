"""Distributions of a workload's figures: what a :class:`SessionTemplate` samples from.

:class:`Constant`, :class:`Uniform`, :class:`LogNormal` and :class:`Zipf` (a plain number
is a constant) — turns per session, prompt and output lengths, tool latency, think time.
Each is a tagged msgspec record (``{"kind": "uniform", …}`` in JSON) checked when built;
:func:`sample_value` draws from any of them with the caller's seeded ``random.Random``.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from functools import cache

import msgspec

from agentflow._errors import ConfigError
from agentflow._seconds import shown

__all__ = ["Constant", "Dist", "LogNormal", "Uniform", "Zipf", "sample_value"]


class _Dist(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", forbid_unknown_fields=True
):
    """What every distribution record is: frozen, tagged by ``kind`` in JSON, and a
    field it does not have is an error (a misspelling), not ignored."""


class Constant(_Dist, frozen=True, tag="constant"):
    """Always ``value``. In JSON, a plain number means the same: ``"turns": 4``.

    Attributes:
        value: the value.
    """

    value: float

    def __post_init__(self) -> None:
        _finite("constant.value", self.value)

    def sample(self, rng: random.Random) -> float:
        """The value (``rng`` is not used)."""
        return self.value


class Uniform(_Dist, frozen=True, tag="uniform"):
    """Uniform on ``[low, high]``; for a whole-number figure (turns, tokens, width),
    each whole number in it equally likely.

    Attributes:
        low, high: the bounds, ``low ≤ high``.
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        _finite("uniform.low", self.low)
        _finite("uniform.high", self.high)
        if self.low > self.high:
            raise ConfigError(f"uniform: low must be ≤ high, got low={self.low}, high={self.high}")

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        return rng.uniform(self.low, self.high)


class LogNormal(_Dist, frozen=True, tag="lognormal"):
    """Log-normal with the given mean and shape, optionally clipped to ``[low, high]``.

    Long-tailed and positive: tool latencies, think times and prompt lengths of agentic
    traffic look like this. The underlying normal has ``σ = sigma`` and
    ``μ = ln(mean) − σ²/2``, so ``mean`` is the mean of the unclipped distribution.

    Attributes:
        mean: the mean (> 0).
        sigma: the shape σ (≥ 0; 0 is the constant ``mean``).
        low, high: clip draws to this range (``None``: no bound).
    """

    mean: float
    sigma: float = 1.0
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        _finite("lognormal.mean", self.mean, "a finite number > 0", lambda x: x > 0)
        _finite("lognormal.sigma", self.sigma, "a finite number ≥ 0", lambda x: x >= 0)
        for name in ("low", "high"):  # an infinite bound overflowed int() when sampled
            value = getattr(self, name)
            if value is not None:
                _finite(f"lognormal.{name}", value, "a finite number or None")
        _bounds("lognormal", self.low, self.high)

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        mu = math.log(self.mean) - self.sigma**2 / 2
        return _clip(rng.lognormvariate(mu, self.sigma), self.low, self.high)


class Zipf(_Dist, frozen=True, tag="zipf"):
    """Zipf on the integers ``low … high``: ``P(k) ∝ (k − low + 1) ** −s``.

    Most draws are small, a few are large: turns per session, sub-agents per fork.

    Attributes:
        s: the exponent (> 0; larger is more skewed towards ``low``).
        low, high: the range (integers, ``0 ≤ low ≤ high``; at most 1,000,000 values).
    """

    s: float = 1.2
    low: int = 1
    high: int = 100

    def __post_init__(self) -> None:
        _finite("zipf.s", self.s, "a finite number > 0", lambda x: x > 0)
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"zipf.{name} must be an int, got {shown(value)}")
        if not 0 <= self.low <= self.high or self.high - self.low >= 1_000_000:
            raise ConfigError(
                f"zipf: need 0 ≤ low ≤ high and at most 1,000,000 values, "
                f"got low={self.low}, high={self.high}"
            )

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        cum = _zipf_cdf(self.s, self.high - self.low + 1)
        return self.low + bisect.bisect_left(cum, rng.random() * cum[-1])


#: A distribution: a plain number (a constant) or one of the tagged records. In JSON,
#: ``4``, ``{"kind": "uniform", "low": 1, "high": 8}``, ``{"kind": "lognormal", "mean":
#: 2.0, "sigma": 0.8}``, ``{"kind": "zipf", "s": 1.2, "low": 1, "high": 40}``.
Dist = int | float | Constant | Uniform | LogNormal | Zipf


def sample_value(dist: Dist, rng: random.Random) -> float:
    """One draw of ``dist``."""
    if isinstance(dist, int | float):
        return float(dist)
    return dist.sample(rng)


@cache
def _zipf_cdf(s: float, n: int) -> list[float]:
    out: list[float] = []
    total = 0.0
    for k in range(1, n + 1):
        total += k**-s
        out.append(total)
    return out


def _finite(
    name: str,
    value: object,
    need: str = "a finite number",
    ok: Callable[[float], bool] = lambda _: True,
) -> float:
    """``value``, if it is a finite real number (not a bool, not a string) for which
    ``ok`` holds; else a :class:`ConfigError` saying ``{name} must be {need}, got …``
    (a string used to fail with a TypeError, ``inf`` only when it was sampled)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
        or not ok(value)
    ):
        raise ConfigError(f"{name} must be {need}, got {shown(value)}")
    return value


def _bounds(kind: str, low: float | None, high: float | None) -> None:
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{kind}: low must be ≤ high, got low={low}, high={high}")


def _clip(x: float, low: float | None, high: float | None) -> float:
    if low is not None and x < low:
        return low
    if high is not None and x > high:
        return high
    return x


def _check_dist(name: str, dist: Dist, *, minimum: float, maximum: float = math.inf) -> None:
    """A distribution's support must not go below ``minimum``, nor above ``maximum``,
    where that is checkable (an unbounded tail is clipped to ``maximum`` when sampled)."""
    if isinstance(dist, bool) or not isinstance(
        dist, int | float | Constant | Uniform | LogNormal | Zipf
    ):
        raise ConfigError(f"{name} must be a number or a distribution, got {dist!r}")
    lo: float | None
    if isinstance(dist, int | float):
        lo = float(dist)
        _finite(name, lo)
    elif isinstance(dist, Constant):
        lo = dist.value
    elif isinstance(dist, Uniform | Zipf):
        lo = dist.low
    else:
        lo = dist.low if dist.low is not None else None
    if lo is not None and lo < minimum:
        raise ConfigError(f"{name} must be ≥ {minimum:g}, but can be {lo:g}")
    hi: float | None
    if isinstance(dist, int | float):
        hi = float(dist)
    elif isinstance(dist, Constant):
        hi = dist.value
    else:
        hi = dist.high
    if hi is not None and hi > maximum:
        raise ConfigError(f"{name} must be ≤ {maximum:,.10g}, but can be {hi:,.10g}")
