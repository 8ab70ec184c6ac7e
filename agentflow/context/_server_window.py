"""The context window a server really has, read from the server itself.

A model's nominal window is not a deployment's: vLLM serves what ``--max-model-len``
says (the report's DeepSeek V4.1 Flash command: 1,000,000, not the 1,048,576 of a
"1M" model card), llama.cpp what ``--ctx-size`` gives each slot. A budget built from
a table can therefore let through a prompt the server refuses. :func:`server_window`
asks the server, once, with a finite timeout:

- ``GET {base}/models`` (``{base}`` ends in ``/v1``): vLLM and agentflow's simulator put
  ``max_model_len`` on each model; llama.cpp puts the slot's ``n_ctx`` in ``meta``
  (checked against the xllamacpp build agentflow tests with: it is the per-slot size,
  with and without a unified KV cache);
- if no model says, llama.cpp's ``GET /props`` (``default_generation_settings.n_ctx``),
  for builds whose ``/v1/models`` lacks it.

Anything else (a hosted API's list without windows, a 404) is "the server does not say":
:meth:`~agentflow.context.ContextBudget.from_server` then falls back to the model table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from agentflow._errors import ConfigError, ConnectError, StreamProtocolError, StreamTimeout
from agentflow._redact import display_url, register_url
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.transport._decode import decode_json
from agentflow.transport._request import Endpoint
from agentflow.transport._shared import MAX_ERROR_BODY

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_WINDOW_TIMEOUT_S", "ModelsSource", "ServerWindow", "server_window"]

#: How long :func:`server_window` waits for each answer, connection included.
DEFAULT_WINDOW_TIMEOUT_S = 10.0

# A models list or a props document is small; a larger answer is not one.
_MAX_ANSWER = 4 * 1024 * 1024


@runtime_checkable
class ModelsSource(Protocol):
    """Anything that can hand over a ``GET /v1/models`` document without HTTP
    (:class:`~agentflow.embedded.SimTransport` does)."""

    async def models(self) -> Mapping[str, Any]:
        """The ``/v1/models`` document: ``{"object": "list", "data": [{"id", …}, …]}``."""


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """A context window as a server reported it.

    Attributes:
        tokens: the window: the most tokens (prompt and output) one request may use.
        model: the id of the model it belongs to, as the server names it.
        field: where it was read: ``"max_model_len"`` (vLLM, the simulator),
            ``"meta.n_ctx"`` (llama.cpp's models list) or ``"props.n_ctx"`` (llama.cpp's
            ``/props``).
        endpoint: the server (without credentials).
    """

    tokens: int
    model: str
    field: str
    endpoint: str


def _window_of(entry: Mapping[str, Any]) -> tuple[int, str] | None:
    value = entry.get("max_model_len")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, "max_model_len"
    meta = entry.get("meta")
    value = meta.get("n_ctx") if isinstance(meta, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, "meta.n_ctx"
    return None


def _names(entry: Mapping[str, Any]) -> set[str]:
    """The names a models-list entry answers to: its ``id``, ``root`` and ``aliases`` —
    the strings among them (a malformed entry's other JSON values name nothing)."""
    aliases = entry.get("aliases")
    names = [entry.get("id"), entry.get("root"), *(aliases if isinstance(aliases, list) else ())]
    return {n for n in names if isinstance(n, str) and n}


def _id_of(entry: Mapping[str, Any]) -> str | None:
    """The entry's ``id``, if it is a string."""
    value = entry.get("id")
    return value if isinstance(value, str) and value else None


def _pick_window(document: Any, model: str | None, endpoint: str) -> ServerWindow | None:
    """The window of ``model`` (or of the only model) in a ``/v1/models`` document.

    Raises:
        ConfigError: several models are served, ``model`` is not given and they differ.
    """
    data = document.get("data") if isinstance(document, Mapping) else None
    entries = [e for e in data if isinstance(e, Mapping)] if isinstance(data, list) else []
    named = [e for e in entries if model in _names(e)] if model is not None else entries
    # A name the server does not list: a one-model server (llama.cpp answers any name
    # with its model) gives its window; among several, which one is not known.
    found = [(e, w) for e in named or entries if (w := _window_of(e)) is not None]
    if not found:
        return None
    if len({w[0] for _, w in found}) > 1:
        served = ", ".join(f"{_id_of(e)!r}: {w[0]:,}" for e, w in found)
        ask = (
            f"model {model!r} is none of them; pass one of their ids"
            if model is not None
            else "pass model= (one of their ids) to say which one the budget is for"
        )
        raise ConfigError(
            f"{endpoint} serves several models with different windows ({served}); {ask}"
        )
    entry, (tokens, field) = found[0]
    return ServerWindow(tokens, _id_of(entry) or model or "", field, endpoint)


async def _get_json(
    session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], endpoint: str,
    timeout_s: float,
) -> Any | None:  # fmt: skip
    """The JSON answer of ``GET url``, or ``None`` for a non-2xx or non-JSON answer."""
    import aiohttp

    try:
        async with session.get(
            url, headers=dict(headers), timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status >= 300:
                await resp.content.read(MAX_ERROR_BODY)
                return None
            # read(n) returns what has arrived so far: read on to the end (or the cap).
            parts: list[bytes] = []
            size = 0
            while size <= _MAX_ANSWER:
                part = await resp.content.read(_MAX_ANSWER + 1 - size)
                if not part:
                    break
                parts.append(part)
                size += len(part)
            raw = b"".join(parts)
    except TimeoutError as exc:
        raise StreamTimeout(
            f"{display_url(url)} did not answer within {timeout_s:g} s (timeout_s)",
            phase="total",
            timeout_s=timeout_s,
            endpoint=endpoint,
        ) from exc
    except aiohttp.ClientError as exc:
        raise ConnectError(f"{display_url(url)}: {exc!r}", endpoint=endpoint) from exc
    if len(raw) > _MAX_ANSWER:
        raise StreamProtocolError(
            f"{display_url(url)} answered more than {_MAX_ANSWER:,} bytes; not a models list",
            endpoint=endpoint,
            payload=raw[:500],
        )
    try:
        return decode_json(raw, msgspec.json.decode)
    except msgspec.DecodeError:
        return None


def _endpoint_of(source: object, api_key: str | None) -> Endpoint:
    if isinstance(source, Endpoint):
        return source
    if isinstance(source, str):
        return Endpoint(base_url=source, api_key=api_key)
    config = getattr(source, "config", None)
    if isinstance(config, Endpoint):
        return config
    raise ConfigError(
        f"server_window: source must be a base URL, an Endpoint, an HTTP transport "
        f"(HTTPTransport, AiohttpTransport) or have an async models() method, got {source!r}"
    )


async def server_window(
    source: object,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout_s: float = DEFAULT_WINDOW_TIMEOUT_S,
    session: aiohttp.ClientSession | None = None,
) -> ServerWindow | None:
    """The context window the server reports, or ``None`` if it does not say.

    Args:
        source: the server: a base URL ending in ``/v1`` (``http://127.0.0.1:8000/v1``),
            an :class:`~agentflow.Endpoint`, an HTTP transport (its endpoint, auth
            included), or a :class:`ModelsSource` such as
            :class:`~agentflow.embedded.SimTransport`.
        model: which served model (matched against ids and aliases); needed only when a
            server serves several with different windows.
        api_key: sent as ``Authorization: Bearer …`` when ``source`` is a URL.
        timeout_s: the limit for each request (at most two), connection included.
        session: an ``aiohttp.ClientSession`` to use; by default a new one, closed after.

    Raises:
        ConfigError: a bad ``source`` or ``timeout_s``; several models with different
            windows and no ``model``.
        ConnectError: the server could not be reached.
        StreamTimeout: it did not answer within ``timeout_s``.
    """
    timeout_s = check_seconds(timeout_s, "server_window: timeout_s", 0.001, MAX_TIMEOUT_S)
    if isinstance(source, ModelsSource) and not isinstance(source, str):
        label = str(getattr(source, "endpoint", type(source).__name__))
        return _pick_window(await source.models(), model, label)
    ep = _endpoint_of(source, api_key)
    register_url(ep.base_url, owner=ep)
    endpoint = base = display_url(ep.base_url)  # userinfo goes as Basic auth, not in the URL
    headers = ep.request_headers({"Accept": "application/json"})
    headers.pop("Content-Type", None)
    own = session is None
    if session is None:
        import aiohttp  # here, not at import: `import agentflow` does not load it

        session = aiohttp.ClientSession()
    http = session
    try:
        document = await _get_json(http, f"{base}/models", headers, endpoint, timeout_s)
        found = _pick_window(document, model, endpoint) if document is not None else None
        if found is not None:
            return found
        root = base.removesuffix("/v1")
        props = await _get_json(http, f"{root}/props", headers, endpoint, timeout_s)
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
            alias = props.get("model_alias") if isinstance(props, dict) else None
            name = alias if isinstance(alias, str) and alias else (model or "")
            return ServerWindow(n_ctx, name, "props.n_ctx", endpoint)
        return None
    finally:
        if own:
            await http.close()
