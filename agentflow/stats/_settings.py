"""Checks on :class:`FleetStats`' numeric settings, so a bad one is a :class:`ConfigError`
naming the parameter and its value (not an ``OverflowError`` or ``TypeError`` from deep
inside the time series, nor a sketch that runs out of memory)."""

from __future__ import annotations

import math

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._seconds import check_seconds, shown

__all__ = ["MAX_BUCKET_S", "MIN_RELATIVE_ACCURACY", "check_fleet_settings"]

#: The widest time bucket (about 31,700 years): anything wider is a mistake, and 1e300 s
#: overflowed converting to nanoseconds.
MAX_BUCKET_S = 1e12

#: The finest relative accuracy of the quantile sketches: each has ~ln(range)/accuracy
#: bins, so finer ones cost seconds per turn, then all memory (1e-9 never finished).
MIN_RELATIVE_ACCURACY = 1e-4


def check_fleet_settings(
    *, relative_accuracy: object, bucket_s: object, max_buckets: object, max_turn_index: object
) -> None:
    """Raise :class:`ConfigError` for the first setting out of range.

    ``relative_accuracy`` in [:data:`MIN_RELATIVE_ACCURACY`, 1); ``bucket_s`` a number of
    seconds in [1 ns, :data:`MAX_BUCKET_S`]; ``max_buckets`` an int ≥ 2;
    ``max_turn_index`` an int ≥ 1.
    """
    if (
        isinstance(relative_accuracy, bool)
        or not isinstance(relative_accuracy, int | float)
        or not MIN_RELATIVE_ACCURACY <= relative_accuracy < 1  # (first: a huge int compares)
        or not math.isfinite(relative_accuracy)
    ):
        raise ConfigError(
            f"relative_accuracy must be a number in [{MIN_RELATIVE_ACCURACY:g}, 1), "
            f"got {shown(relative_accuracy)}"
        )
    check_seconds(bucket_s, "bucket_s", 1e-9, MAX_BUCKET_S)
    check_count(max_buckets, "max_buckets", 2)
    check_count(max_turn_index, "max_turn_index", 1)
