"""One check of a server's base URL, for every place that takes one.

:class:`~agentflow.Endpoint` (and so every transport built on one), and
``agentflow.llamacpp``'s ``server_slots`` and ``oversubscription``, each checked its
``base_url`` a little differently: one took ``http://:8080/v1`` (no host), another a
port of 0 or 99999, a third a query string; a malformed IPv6 address was a bare
``ValueError``. :func:`check_base_url` is the one rule, with one wording; each error
names the field and the value, without the URL's userinfo (``user:password@``).
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from agentflow._errors import ConfigError
from agentflow._redact import display_url

__all__ = ["check_base_url"]

_EXAMPLE = "http://127.0.0.1:8000/v1"


def check_base_url(value: object, field: str) -> SplitResult:
    """``value`` split into its parts, if it is a server's base URL: a string, ``http``
    or ``https``, with a host and, if it gives one, a port from 1 to 65535; no query
    string or fragment (a path is appended to it) and no space or control character
    (``urlsplit`` drops a tab or line break without a word, and a space would end up in
    the request line). Else a :class:`ConfigError` that begins with ``field`` (such as
    ``"Endpoint.base_url"``) and repeats the value, its userinfo left out, or for a
    query or fragment not at all (some providers take keys there)."""
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be an http(s) URL such as {_EXAMPLE}, got {value!r}")
    bare = value.split("#", 1)[0].split("?", 1)[0]
    if bare != value:  # looked at first: no other message may repeat what follows the '?'
        raise ConfigError(
            f"{field} must not have a query string or fragment ({display_url(bare)!r} has "
            "one): the request path is base_url + '/chat/completions'; send what it "
            "carries in Endpoint.headers or Endpoint.extra_body"
        )
    shown = display_url(value)
    if any(c <= " " or c == "\x7f" for c in value):
        raise ConfigError(
            f"{field} must be an http(s) URL without spaces or control characters, got {shown!r}"
        )
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise ConfigError(
            f"{field} must be an http(s) URL such as {_EXAMPLE} ({exc}), got {shown!r}"
        ) from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{field} must be an http(s) URL such as {_EXAMPLE}, got {shown!r}")
    if not parts.hostname:
        raise ConfigError(f"{field} must be an http(s) URL with a host, got {shown!r}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # not a number, out of range, or 0 (which the transport took for 80)
        raise ConfigError(
            f"{field} must be an http(s) URL whose port, if it has one, is from 1 to 65535, "
            f"got {shown!r}"
        )
    return parts
