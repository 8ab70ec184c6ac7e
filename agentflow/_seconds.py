"""Numbers of seconds a user gives — a lease's length, a store's timeouts — checked
alike: :func:`check_seconds`, and :func:`check_lease_ttl` for the one ``Fleet`` and
every store's ``claim``/``renew`` share. Outside the ``store`` package, so that checking
a fleet's options does not import the stores (``tests/test_public_surface.py``)."""

from __future__ import annotations

import math

from agentflow._errors import ConfigError

__all__ = ["MAX_LEASE_TTL_S", "MAX_TIMEOUT_S", "check_lease_ttl", "check_seconds", "shown"]

#: The longest lease, in seconds (~31 years): an expiry is stored as integer nanoseconds
#: since the epoch, which must fit a 64-bit integer (``BIGINT``).
MAX_LEASE_TTL_S = 1e9

#: The longest timeout a client call takes, in seconds (~31 years): finite, as every wait
#: must be (``inf`` would wait for ever).
MAX_TIMEOUT_S = 1e9


def check_seconds(value: object, name: str, low: float, high: float) -> float:
    """``value`` as a float, if it is a finite real number of seconds in [low, high]
    (not a bool).

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not low <= value <= high  # first: an int too large for a float compares exactly
        or not math.isfinite(value)
    ):
        raise ConfigError(
            f"{name} must be a finite number of seconds in [{low:g}, {high:g}], got {shown(value)}"
        )
    return float(value)


def shown(value: object, *, max_bits: int = 64) -> str:
    """``repr(value)`` for an error message, but an int of over ``max_bits`` bits by its
    size (its digits could be thousands, past what ``repr`` converts: a ValueError
    instead of the message)."""
    if isinstance(value, int) and value.bit_length() > max_bits:
        return f"an int of {value.bit_length()} bits"
    try:
        return repr(value)
    except ValueError:  # (a Fraction of such ints: past the int-to-str digit limit too)
        return f"a {type(value).__name__} too long to print"


def check_lease_ttl(ttl_s: object, name: str) -> float:
    """``ttl_s``, a lease's length, in [0.001, :data:`MAX_LEASE_TTL_S`]: under 1 ms it
    would be stored as 0 ns (a lease that has expired when it is taken, so a second owner
    gets it too); ``inf`` or ``nan`` cannot be stored at all.

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    return check_seconds(ttl_s, name, 0.001, MAX_LEASE_TTL_S)
