"""How many leading, or trailing, items two sequences share — texts or message lists.

Found by binary search over slices: each step compares two slices in C (``str`` or
``list`` equality), so the cost is a few passes over the shared part, not a Python loop
per item. The cache-buster's diff of two prompts (``context/_bustdiff.py``) and a history
rewrite's delta (``_rewrite.py``) use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["common_prefix", "common_suffix"]


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_suffix(a: Sequence[Any], b: Sequence[Any], limit: int) -> int:
    """How many trailing items ``a`` and ``b`` share, at most ``limit`` (pass the length
    left after their :func:`common_prefix`, so that the two never overlap)."""
    na, nb = len(a), len(b)
    if a[na - limit :] == b[nb - limit :]:
        return limit
    lo, hi = 0, limit
    while hi - lo > 1:  # the last lo items equal, the last hi not
        mid = (lo + hi) // 2
        if a[na - mid : na - lo] == b[nb - mid : nb - lo]:
            lo = mid
        else:
            hi = mid
    return lo
