"""NaN and ±Inf out of a report's ``server`` section: JSON has no such numbers, and a
report holds none (``docs/report-schema.md``).

A server may export them — a gauge with nothing to average, a sum that overflowed — and
the Prometheus text format allows them. :func:`leave_out_nonfinite` turns each into
``null`` (a histogram whose counts are not finite is left out whole: its buckets and
quantiles mean nothing) and says where, for the section's notes.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["leave_out_nonfinite"]


def leave_out_nonfinite(section: dict[str, Any]) -> list[str]:
    """Replace every NaN and ±Inf in ``section`` by ``None``, in place, leaving out whole
    each latency histogram whose count or bucket counts are not finite; returns the
    paths of what was left out (``counters.prompt_tokens``, ``latency.e2e_s``…)."""
    found: list[str] = []
    latency = section.get("latency") or {}
    for key, hist in list(latency.items()):
        counts = [hist.get("count"), *(c for _, c in hist.get("buckets", ()))]
        if not all(_finite(c) for c in counts):
            del latency[key]
            found.append(f"latency.{key}")
    _walk(section, "", found)
    return found


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _walk(value: Any, path: str, found: list[str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}" if path else str(k)
            if isinstance(v, float) and not math.isfinite(v):
                value[k] = None
                found.append(where)
            else:
                _walk(v, where, found)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, float) and not math.isfinite(v):
                value[i] = None
                found.append(f"{path}[{i}]")
            else:
                _walk(v, f"{path}[{i}]", found)
