"""The values of ``agentflow bench``'s flags: ``--slo`` (:func:`parse_slo`), the
comma-separated levels of ``--rate`` and ``--concurrency``, ``--sweep-factor``; each
refused naming its flag."""

from __future__ import annotations

import argparse
import math
import re

from agentflow._cliargs import positive
from agentflow._errors import ConfigError
from agentflow.stats import SLO

__all__ = ["factor", "numbers", "parse_slo"]

_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6, "m": 60.0}
_SLO_KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "queue": "queue_wait_s",
             "queue_wait": "queue_wait_s", "itl": "itl_max_s", "itl_max": "itl_max_s"}  # fmt: skip


def parse_slo(text: str) -> SLO:
    """An SLO from ``ttft=2s,tpot=10ms`` (keys: ttft, tpot, e2e, queue, itl; units: s,
    ms, us; a bare number is seconds).

    Raises:
        ConfigError: an unknown key or a value that is not a duration > 0.
    """
    bounds: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        field = _SLO_KEYS.get(key.strip().lower())
        if not sep or field is None:
            raise ConfigError(
                f"--slo: {part!r} is not KEY=DURATION with KEY one of ttft, tpot, e2e, queue, itl"
            )
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|us|µs|m)?\s*", value)
        if m is None:
            raise ConfigError(f"--slo: {key}={value!r} is not a duration (e.g. 2s, 10ms)")
        bounds[field] = float(m.group(1)) * _UNITS[m.group(2) or "s"]
        if not (math.isfinite(bounds[field]) and bounds[field] > 0):
            raise ConfigError(f"--slo: {key}={value!r} is not a duration > 0 (e.g. 2s, 10ms)")
    if not bounds:
        raise ConfigError(f"--slo: no bound in {text!r} (e.g. ttft=2s,tpot=10ms)")
    return SLO(**bounds)  # type: ignore[arg-type]


def numbers(flag: str, text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"{flag} must be a number or a comma-separated list, got {text!r}"
        ) from None
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise ConfigError(f"{flag} values must be finite numbers > 0, got {text!r}")
    return values


def factor(text: str) -> float:
    """``--sweep-factor``'s type: a finite number > 1 (each level larger than the last)."""
    value = positive(text)
    if value <= 1:
        raise argparse.ArgumentTypeError(f"must be > 1 (each level larger), got {text}")
    return value
