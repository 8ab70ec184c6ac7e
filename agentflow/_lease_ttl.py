"""How long a session's lease may be: :func:`check_lease_ttl`, shared by ``Fleet`` and
every store's ``claim``/``renew``. Outside the ``store`` package, so that checking a
fleet's options does not import the stores (``tests/test_public_surface.py``)."""

from __future__ import annotations

import math

from agentflow._errors import ConfigError

__all__ = ["MAX_LEASE_TTL_S", "check_lease_ttl"]

#: The longest lease, in seconds (~31 years): an expiry is stored as integer nanoseconds
#: since the epoch, which must fit a 64-bit integer (``BIGINT``).
MAX_LEASE_TTL_S = 1e9


def check_lease_ttl(ttl_s: object, name: str) -> float:
    """``ttl_s``, a lease's length, if it is a finite real number of seconds in
    [0.001, :data:`MAX_LEASE_TTL_S`]: under 1 ms it would be stored as 0 ns (a lease
    that has expired when it is taken, so a second owner gets it too); ``inf`` or
    ``nan`` cannot be stored at all.

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, int | float)
        or not math.isfinite(ttl_s)
        or not 0.001 <= ttl_s <= MAX_LEASE_TTL_S
    ):
        raise ConfigError(
            f"{name} must be a finite number of seconds in [0.001, {MAX_LEASE_TTL_S:g}],"
            f" got {ttl_s!r}"
        )
    return float(ttl_s)
