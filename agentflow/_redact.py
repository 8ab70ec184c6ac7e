"""Keeping credentials out of everything agentflow prints, logs, raises or writes.

A key can leak in ways no field name gives away: a server that echoes the key it
rejected in its 401 message, a ``user:password@`` in a base URL that ends up in
every error and replica name, a custom ``api-key`` header in a ``repr``. Masking
fields *named* like credentials is not enough, so agentflow also masks credential
*values*: every key it is given — an :class:`~agentflow.Endpoint`'s ``api_key``,
its credential headers (``api-key``, ``x-api-key``, ``x-auth-token``, ``…-key``),
the password of a URL's userinfo, an ``AsyncOpenAI`` client's key, a
``ServerCounter``'s key — is registered here, process-wide, when the object that
holds it is built. :func:`redact` then replaces each registered value, any
``Bearer``/``Basic`` credential and any URL userinfo with ``***``.

The registry does not only grow: a secret registered for an *owner* (the
``Endpoint``, transport, counter or store that holds it) is counted once per live
owner and forgotten when the last of them is garbage-collected, so a process that
builds endpoints with ever new keys keeps only the live ones (and masking costs a
substring test per live secret). Secrets registered without an owner — what users
register themselves — stay for the life of the process.

Response headers a trace keeps (``x-*``) pass through :func:`redact_headers`:
credential-named ones (:func:`is_secret_header`) are masked whole, the others by value.

Redaction runs where text leaves agentflow — error messages (when an
:class:`~agentflow.AgentflowError` is built), log lines, reports, ``repr``s and
names — never per token or per chunk. Its cost is a substring test per registered
secret, plus two regular-expression scans.
"""

from __future__ import annotations

import base64
import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "display_url",
    "error_line",
    "is_credential_name",
    "is_secret_header",
    "live_secrets",
    "message_of",
    "redact",
    "redact_bytes",
    "redact_data",
    "redact_headers",
    "register_headers",
    "register_secret",
    "register_url",
]

#: What a credential is replaced with.
MASK = "***"

#: Values shorter than this are not masked by value (masking "abc" everywhere would
#: garble every message); they are still masked as ``Bearer``/``Basic`` tokens and
#: as URL userinfo, and never printed by agentflow's own ``repr``s.
MIN_SECRET_LEN = 6

# Each secret and how many holders keep it registered: live owners, plus one for a
# registration without an owner (never released). Changed under _lock: a released
# owner's finalizer may run in any thread, whenever the collector runs.
_secrets: dict[str, int] = {}
_permanent: set[str] = set()
_ordered: tuple[str, ...] = ()  # longest first, so a secret inside another is masked whole
_lock = threading.RLock()  # reentrant: a collection inside a registration may release
_generation = 0  # bumped by _forget_all: finalizers of an older registry release nothing

# An auth scheme and its token: "Bearer sk-…", "Basic dXNlcjpwYXNz" (see _mask_token for
# which Basic tokens count: "Basic authentication" is no credential).
_AUTH_TOKEN = re.compile(
    r"\b(Bearer)(\s+)[^\s'\",;]+|\b(Basic)(\s+)[A-Za-z0-9+/]{8,}={0,2}", re.IGNORECASE
)
# The userinfo of a "scheme://userinfo@" anywhere in a text, up to the authority's last
# "@" (an unescaped "@" in a password is taken as part of it, as urllib does). Anchored
# at the "://" by a look-behind, whatever comes before it: a pattern that matched the
# scheme too ("[a-z][a-z0-9+.-]*://") was tried from every word boundary and backtracked
# over the whole run of scheme characters each time — quadratic in a server's "a.a.a…@"
# message (48 KB: a session stalled 20 s in its error).
_USERINFO = re.compile(r"(?<=://)[^/\s?#'\"<>]*@")
# Names of headers that hold credentials: those that end in a credential word
# ("api-key", "x-auth-token", "Proxy-Authorization", "Ocp-Apim-Subscription-Key"), not
# those that merely mention one ("x-token-budget").
_CREDENTIAL_NAME = re.compile(
    r"(^|[-_])(api[-_]?key|key|token|secret|passw(or)?d|authorization|auth|cookie|signature"
    r"|credentials?)$",
    re.IGNORECASE,
)


def register_secret(value: str | None, *, owner: object | None = None) -> None:
    """Mask ``value`` wherever agentflow prints it from now on (process-wide).

    agentflow registers the keys it is given itself; call this for a credential it
    cannot see (one your own transport or ``http_client`` adds). ``None``, empty and
    very short values (< 6 characters) are ignored. A ``Bearer``/``Basic`` prefix is
    dropped, so registering a header value registers its token.

    Args:
        value: the credential.
        owner: the object that holds it. The value stays registered while this or
            another owner of it is alive, and is forgotten when the last one is
            garbage-collected. Without an owner (or with one that takes no weak
            references) it stays for the life of the process.
    """
    token = _token(value)
    if token is not None:
        _hold((token,), owner)


def _token(value: str | None) -> str | None:
    """What of ``value`` is registered, or ``None`` for nothing."""
    if not value:
        return None
    m = re.fullmatch(r"\s*(?:Bearer|Basic)\s+(\S+)\s*", value, re.IGNORECASE)
    token = m.group(1) if m else value.strip()
    return token if len(token) >= MIN_SECRET_LEN else None


def _hold(tokens: tuple[str, ...], owner: object | None) -> None:
    """Count ``tokens`` held by ``owner`` (forever when ``None``)."""
    global _ordered
    if owner is None:
        tokens = tuple(t for t in tokens if t not in _permanent)
    if not tokens:
        return
    with _lock:
        new = False
        for t in tokens:
            n = _secrets.get(t, 0)
            new |= n == 0
            _secrets[t] = n + 1
        try:
            fin = None if owner is None else weakref.finalize(owner, _release, tokens, _generation)
        except TypeError:  # an owner without weak references: kept for the process
            fin = None
        if fin is None:
            _permanent.update(tokens)
        else:
            fin.atexit = False  # nothing to forget at exit
        if new:
            _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def _release(tokens: tuple[str, ...], generation: int) -> None:
    """An owner of ``tokens`` was collected: forget those it was the last holder of."""
    global _ordered
    with _lock:
        if generation != _generation:
            return
        gone = False
        for t in tokens:
            n = _secrets.get(t, 0) - 1
            if n > 0:
                _secrets[t] = n
            elif t in _secrets:
                del _secrets[t]
                gone = True
        if gone:
            _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def live_secrets() -> int:
    """How many distinct values are registered now (each costs a substring test per
    :func:`redact`): those of live owners and those registered without one."""
    return len(_secrets)


def register_url(url: str, *, owner: object | None = None) -> None:
    """Register the password in ``url``'s userinfo (raw, percent-decoded, and as the
    base64 ``user:password`` HTTP Basic auth sends); with no password, the user name, which
    is then the credential (a token given as ``https://TOKEN@host``). ``owner``: as for
    :func:`register_secret`."""
    if "@" not in url:
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        user, password = parts.username or "", parts.password
    elif parts.username:  # a token given as the user name ("https://TOKEN@host/v1")
        user, password = parts.username, ""
    else:
        return
    secret = password or user
    basic = f"{unquote(user)}:{unquote(password)}".encode()
    values = (secret, unquote(secret), base64.b64encode(basic).decode("ascii"))
    _hold(tuple(dict.fromkeys(t for t in map(_token, values) if t is not None)), owner)


def register_headers(headers: Mapping[str, object], *, owner: object | None = None) -> None:
    """Register the values of the headers whose names say they hold credentials.
    ``owner``: as for :func:`register_secret`."""
    tokens = (
        _token(value)
        for name, value in headers.items()
        if is_credential_name(name) and isinstance(value, str)
    )
    _hold(tuple(dict.fromkeys(t for t in tokens if t is not None)), owner)


def is_credential_name(name: str) -> bool:
    """Whether a header called ``name`` holds a credential: its name ends in a credential
    word (``api-key``, ``Authorization``, ``x-auth-token``, ``…-Subscription-Key``)."""
    return _CREDENTIAL_NAME.search(name.strip()) is not None


# A response header whose name has a part ending in "key" or "token" ("x-api-key",
# "x-amz-security-token"; not "x-ratelimit-remaining-tokens", a count), or starting with
# "auth", or naming a secret, signature, password, credential or cookie.
_SECRET_PART = re.compile(
    r"(key|token)$|^auth|secret|signature|passw|credential|cookie", re.IGNORECASE
)


@lru_cache(maxsize=512)
def is_secret_header(name: str) -> bool:
    """Whether a response header called ``name`` holds a secret, so that a trace keeps
    ``***`` for its value: a part of its name (split at ``-`` and ``_``) ends in ``key``
    or ``token``, starts with ``auth``, or names a secret, signature, password,
    credential or cookie (``x-api-key``, ``x-amz-security-token``, ``x-goog-signature``,
    ``x-auth-request-user``; not ``x-request-id`` or ``x-ratelimit-remaining-tokens``)."""
    return any(_SECRET_PART.search(part) for part in re.split(r"[-_]", name))


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The ``x-*`` headers of ``headers`` (name, value pairs), names lower-cased, each value
    masked whole when :func:`is_secret_header`, else :func:`redact`-ed."""
    kept: dict[str, str] = {}
    for k, v in headers:
        if k[:2].lower() == "x-":
            name = k.lower()
            kept[name] = MASK if is_secret_header(name) else redact(v)
    return kept


def display_url(url: str) -> str:
    """``url`` without its userinfo: ``http://u:p@host:8000/v1`` → ``http://host:8000/v1``.

    Any other string is returned as it is.
    """
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _USERINFO.sub("", url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def redact(text: str) -> str:
    """``text`` with every registered secret and every ``Bearer``/``Basic`` credential
    replaced by ``***``, and every URL's userinfo dropped (``http://u:p@h/`` → ``http://h/``).
    """
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, MASK)
    if "earer" in text or "asic" in text or "ASIC" in text or "EARER" in text:
        text = _AUTH_TOKEN.sub(_mask_token, text)
    if "@" in text and "://" in text:
        text = _USERINFO.sub("", text)
    return text


def _mask_token(m: re.Match[str]) -> str:
    if m[1]:
        return f"{m[1]}{m[2]}{MASK}"
    token = m[0][len(m[3]) + len(m[4]) :]
    # Base64 comes in blocks of 4 and is rarely one lower-case word.
    if len(token) % 4 or (token.isalpha() and token.islower()):
        return m[0]
    return f"{m[3]}{m[4]}{MASK}"


def error_line(error: BaseException) -> str:
    """``error`` as ``"Type: message"`` (``"Type"`` when its message is empty), redacted:
    how a report and a store show an error."""
    name, message = type(error).__name__, message_of(error)
    return redact(f"{name}: {message}" if message else name)


def message_of(error: BaseException) -> str:
    """``str(error)``, or ``<unprintable TypeName>`` when that raises: one error's raising
    ``__str__`` never ends a run, a session or a stored run's record."""
    try:
        return str(error)
    except Exception:
        return f"<unprintable {type(error).__name__}>"


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` for bytes that may not be UTF-8: registered secrets only."""
    for secret in _ordered:
        raw = secret.encode()
        if raw in data:
            data = data.replace(raw, MASK.encode())
    return data


#: How deep :func:`redact_data` goes: a dict, list or tuple nested deeper than this is
#: replaced by ``***`` whole. Only a server's JSON nests so deep (an error body of
#: ``[[[…`` a few hundred levels deep once made redaction raise ``RecursionError``).
MAX_DATA_DEPTH = 64


def redact_data(obj: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, strings, numbers) with every
    string redacted and the string values of credential-named keys masked whole; a
    container nested deeper than :data:`MAX_DATA_DEPTH` levels is masked whole."""
    return _redact_data(obj, MAX_DATA_DEPTH)


def _redact_data(obj: Any, depth: int) -> Any:
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping | list | tuple) and depth <= 0:
        return MASK
    if isinstance(obj, Mapping):
        return {
            redact(k) if isinstance(k, str) else k: (
                MASK
                if isinstance(k, str) and isinstance(v, str) and _is_credential_key(k)
                else _redact_data(v, depth - 1)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        items: Iterable[Any] = (_redact_data(v, depth - 1) for v in obj)
        return list(items) if isinstance(obj, list) else tuple(items)
    return obj


# Narrower than header names: a report's "token_source" or "tokenizer" is no secret.
_CREDENTIAL_KEY = re.compile(
    r"^(x-)?(api[_-]?key|authorization|passw(or)?d|secret|access[_-]?token|auth[_-]?token)$",
    re.IGNORECASE,
)


def _is_credential_key(key: str) -> bool:
    return _CREDENTIAL_KEY.match(key) is not None


def _forget_all() -> None:
    """Tests only: empty the registry (owners still alive release nothing more)."""
    global _ordered, _generation
    with _lock:
        _generation += 1
        _secrets.clear()
        _permanent.clear()
        _ordered = ()
