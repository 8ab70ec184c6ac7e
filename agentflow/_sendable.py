"""What a request body can carry: JSON in UTF-8.

A Python ``str`` can hold a lone surrogate (``os.fsdecode`` makes one of each undecodable
byte of a file name; a surrogate pair split into two code points is two), which UTF-8
cannot encode, and a mapping can hold an object JSON has no form for. Sent as they are,
either fails the request's encoding — at the session's first turn, or later, deep in
the transport; a float that is not finite (NaN, ±inf) has no JSON form either, and the
encoder writes it as ``null`` — sent, silently, as something else. So what a session is
*given* (an agent's instructions and params, a task) is checked when it is made
(:func:`check_sendable`: a :class:`ConfigError` naming the field), and what a *tool*
returns, which nobody can fix in time, is repaired (:func:`sendable_text`: U+FFFD for
each lone surrogate; a non-finite float in a JSON result stays ``null``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from agentflow._errors import ConfigError

__all__ = ["check_sendable", "sendable_text"]

#: The transport's encoder (``transport/_http.py``): what it takes is what passes.
_encode = msgspec.json.encode


def sendable_text(text: str) -> str:
    """``text`` as a request can carry it: each lone surrogate becomes U+FFFD (a surrogate
    pair split into two code points is joined). Any other text is returned as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def check_sendable(
    value: Any,
    where: str,
    *,
    encode: Callable[[Any], object] = _encode,
    carrier: str = "a request",
) -> None:
    """Raise :class:`ConfigError` if ``value`` cannot be part of a request body; the
    message starts with ``where`` and names the item inside ``value`` that fails — a
    lone surrogate, an object JSON has no form for, a float that is not finite.

    A run store checks what it keeps but never sends (a session's metadata, a run's
    config) with its own ``encode`` (which stores an object JSON has no form for as its
    ``repr``) and ``carrier="a run store"``; it keeps a non-finite float as ``null``."""
    try:
        encoded = encode(value)
    except Exception as exc:  # UnicodeEncodeError is a ValueError; a repr may raise anything
        raise ConfigError(f"{where}{_why(value, '', exc, carrier)}") from None
    # The encoder wrote each NaN or ±inf as ``null``: only then is ``value`` looked at
    # again, in MessagePack, which keeps each float as its 8 bytes; only if one of them
    # may be NaN or ±inf is it walked in Python, for where the float is.
    if (
        carrier == "a request"
        and isinstance(encoded, bytes)
        and b"null" in encoded
        and _may_hold_non_finite(value)
    ):
        # (a msgspec.Raw, JSON already, holds no float: None in its place)
        found = _non_finite(msgspec.to_builtins(value, enc_hook=_no_float))
        if found is not None:
            keys, number = found
            at = "".join(f"[{k!r}]" for k in reversed(keys))
            raise ConfigError(
                f"{where}{at} is {number!r}, a float JSON has no form for (it would be "
                "sent as null): give a finite number, or leave the field out"
            )


#: A MessagePack float64 (``0xcb`` and its 8 bytes, big-endian) whose 11 exponent bits
#: are all set: NaN or ±inf. (Bytes of a ``bytes`` value may match too: then the walk
#: finds nothing.)
_NON_FINITE_FLOAT64 = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def _no_float(_: object) -> None:
    return None


def _may_hold_non_finite(value: Any) -> bool:
    """Whether ``value``'s MessagePack holds a float64 that may be NaN or ±inf — or
    cannot be made (an int past 64 bits, which JSON writes and MessagePack does not):
    then the walk decides."""
    try:
        packed = msgspec.msgpack.encode(value)
    except Exception:
        return True
    return _NON_FINITE_FLOAT64.search(packed) is not None


def _non_finite(value: Any) -> tuple[list[Any], float] | None:
    """The first float in ``value`` (``msgspec.to_builtins``' output: sets, dataclasses
    and structs made lists and dicts, as the encoder sends them) that is NaN or
    infinite: the keys and indexes to it, innermost first, and the number."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ([], value)
    if isinstance(value, Mapping):
        pairs: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        pairs = enumerate(value)
    else:
        return None
    for k, v in pairs:
        hit = _non_finite(v)
        if hit is not None:
            hit[0].append(k)
            return hit
    return None


def _why(value: Any, path: str, exc: Exception, carrier: str) -> str:
    """Where in ``value`` (at ``path``) the first text ``carrier`` cannot carry is, and
    why; else the encoder's own words."""
    found = _lone_surrogate(value, path)
    if found is not None:
        at, char, index = found
        return (
            f"{at} holds a lone surrogate, U+{ord(char):04X} at index {index}, which "
            f"{carrier} cannot carry (JSON in UTF-8): replace it (or decode the bytes it "
            "came from with errors='replace')"
        )
    done = "sent" if carrier == "a request" else f"kept by {carrier}"
    return f"{path} cannot be {done} as JSON: {exc}"


def _lone_surrogate(value: Any, path: str) -> tuple[str, str, int] | None:
    if isinstance(value, str):
        if value.isascii():
            return None
        for i, c in enumerate(value):
            if "\ud800" <= c <= "\udfff":
                return path, c, i
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            hit = _lone_surrogate(k, f"{path} key") or _lone_surrogate(v, f"{path}[{k!r}]")
            if hit is not None:
                return hit
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            hit = _lone_surrogate(v, f"{path}[{i}]")
            if hit is not None:
                return hit
    return None
