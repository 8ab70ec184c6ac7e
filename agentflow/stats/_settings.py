"""Checks on :class:`FleetStats`' numeric settings, so a bad one is a :class:`ConfigError`
naming the parameter and its value (not an ``OverflowError`` or ``TypeError`` from deep
inside the time series)."""

from __future__ import annotations

import math

from agentflow._errors import ConfigError

__all__ = ["MAX_BUCKET_S", "check_fleet_settings"]

#: The widest time bucket (about 31,700 years): anything wider is a mistake, and 1e300 s
#: overflowed converting to nanoseconds.
MAX_BUCKET_S = 1e12


def check_fleet_settings(
    *, relative_accuracy: object, bucket_s: object, max_buckets: object, max_turn_index: object
) -> None:
    """Raise :class:`ConfigError` for the first setting out of range.

    ``relative_accuracy`` in (0, 1); ``bucket_s`` a number of seconds in
    (0, :data:`MAX_BUCKET_S`]; ``max_buckets`` an integer ≥ 2; ``max_turn_index`` an
    integer ≥ 1.
    """
    accuracy = _real(relative_accuracy)
    if accuracy is None or not 0 < accuracy < 1:
        raise ConfigError(f"relative_accuracy must be in (0, 1), got {relative_accuracy!r}")
    width = _real(bucket_s)
    if width is None or not 0 < width <= MAX_BUCKET_S:
        raise ConfigError(
            f"bucket_s must be a number of seconds > 0 and ≤ {MAX_BUCKET_S:g}, got {bucket_s!r}"
        )
    if not (isinstance(max_buckets, int) and not isinstance(max_buckets, bool)) or max_buckets < 2:
        raise ConfigError(f"max_buckets must be an integer ≥ 2, got {max_buckets!r}")
    if (
        not (isinstance(max_turn_index, int) and not isinstance(max_turn_index, bool))
        or max_turn_index < 1
    ):
        raise ConfigError(f"max_turn_index must be an integer ≥ 1, got {max_turn_index!r}")


def _real(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool, a string, NaN or
    an infinity), else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
