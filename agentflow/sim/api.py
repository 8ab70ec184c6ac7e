"""The simulator's OpenAI-compatible API shapes: the request body, checked, and the JSON answers.

A ``POST /v1/chat/completions`` body is decoded by msgspec straight into
:class:`ChatBody`, a Struct naming the fields the simulator reads with their types
(unknown fields are skipped, as vLLM ignores them); a wrong type is a
:class:`~agentflow.sim.errors.RequestRejected` 400 whose ``param`` names the field and
whose message gives its path and the type expected. The checks no type can say (one
choice only, a ``role`` in every message, a ``tool_choice`` that names a given tool…)
follow in :func:`parse_chat_body`, worded as vLLM words them. The result is a
:class:`ChatParams`: what the engine and the chunk encoder need.

The answers' shapes — vLLM's error body (:func:`error_body`), the ``/v1/models``
document (:func:`models_document`) and one request's ground truth (:func:`record_json`)
— are :mod:`agentflow.sim.answers`'s, importable from here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agentflow.sim.answers import error_body, models_document, record_json
from agentflow.sim.errors import RequestRejected
from agentflow.sim.nesting import MAX_NESTING, check_nesting

__all__ = [
    "MAX_NESTING",
    "ChatBody",
    "ChatParams",
    "StreamOptions",
    "TokenizeBody",
    "decode_chat_body",
    "decode_tokenize_body",
    "error_body",
    "models_document",
    "parse_chat_body",
    "parse_request_id",
    "record_json",
]


class StreamOptions(msgspec.Struct, kw_only=True):
    """``stream_options``: the field the simulator reads, typed (``"false"`` is a 400,
    not a true value); other fields are skipped."""

    include_usage: bool | None = None


class ChatBody(msgspec.Struct, kw_only=True):
    """A ``POST /v1/chat/completions`` body as sent: the fields the simulator reads.

    ``messages`` and ``tools`` stay plain objects: the chat template renders them as given.
    """

    messages: list[dict[str, Any]]
    model: str | None = None
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True
    stop: str | list[str] | None = None
    seed: int | None = None
    agentflow_tool_rounds: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatParams:
    """A chat-completions body, checked: what the engine and the encoder need.

    Attributes:
        model: the requested model name (echoed in responses), or ``None``.
        messages: the messages.
        tools: the tools, or ``None``.
        tool_choice: as given.
        parallel_tool_calls: as given (default ``True``).
        max_tokens: ``max_completion_tokens`` or ``max_tokens``, or ``None``.
        stop: as given.
        stream: whether to stream.
        include_usage: ``stream_options.include_usage``.
        seed: the request's ``seed`` (varies the output), or ``None``.
        tool_rounds: agentflow's extension field ``agentflow_tool_rounds``: this
            conversation's tool rounds, instead of the server's ``--tool-rounds``.
    """

    model: str | None
    messages: list[Mapping[str, Any]]
    tools: list[Mapping[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    include_usage: bool = False
    seed: int | None = None
    tool_rounds: int | None = None


_decode_body = msgspec.json.Decoder(ChatBody).decode
_convert = msgspec.convert
#: ``… - at `$.max_tokens` `` / ``… - at `$.messages[0].role` ``: the field is the first name.
_AT = re.compile(r"^(?P<why>.*?) - at `\$\.(?P<field>[A-Za-z_][A-Za-z0-9_]*)(?P<rest>[^`]*)`$")
_REQUEST_ID = re.compile(r"[0-9]{1,18}")
_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")


def _bad(message: str, param: str | None = None) -> RequestRejected:
    return RequestRejected(message, status=400, param=param)


def _too_deep_json() -> RequestRejected:
    return _bad("Invalid JSON body: JSON nested too deep.")


def _rejected(exc: msgspec.ValidationError) -> RequestRejected:
    """A msgspec validation error as a 400 naming the field it is about."""
    text = str(exc)
    m = _AT.match(text)
    if m is not None:
        field = m["field"]
        return _bad(f"Invalid value for `{field}{m['rest']}`: {m['why']}.", field)
    m = _MISSING.search(text)
    if m is not None:
        field = m["field"]
        return _bad(f"{field} is required: a non-empty list of message objects.", field)
    return _bad("The request body must be a JSON object.")


def decode_chat_body(raw: bytes) -> ChatParams:
    """Decode and check the raw bytes of a ``POST /v1/chat/completions`` body.

    Raises:
        RequestRejected: a 400 — invalid JSON, a field of the wrong type (``param`` names
            it), or a check of :func:`parse_chat_body`.
    """
    try:
        body = _decode_body(raw)
    except msgspec.ValidationError as exc:
        raise _rejected(exc) from None
    except msgspec.DecodeError as exc:
        raise _bad(f"Invalid JSON body: {exc}") from None
    except RecursionError:
        raise _too_deep_json() from None
    return _check(body)


def parse_chat_body(body: Any) -> ChatParams:
    """Check a ``POST /v1/chat/completions`` body (decoded JSON, or a :class:`ChatBody`)
    the way vLLM's server does.

    Raises:
        RequestRejected: a 400 with vLLM's error shape, naming the field at fault.
    """
    if not isinstance(body, ChatBody):
        if not isinstance(body, Mapping):
            raise _bad("The request body must be a JSON object.")
        try:
            body = _convert(body, ChatBody)
        except msgspec.ValidationError as exc:
            raise _rejected(exc) from None
    return _check(body)


def _check(body: ChatBody) -> ChatParams:
    """What the types cannot say, in vLLM's words."""
    messages = body.messages
    if not messages:
        raise _bad("messages must be a non-empty list of message objects.", "messages")
    check_nesting(messages, "messages")
    check_nesting(body.tools, "tools")
    _check_messages(messages)
    n = body.n
    if n is not None and n != 1:
        raise _bad(f"The simulator serves n=1 only, got n={n!r}.", "n")
    stream = bool(body.stream)
    options = body.stream_options
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
        include_usage = bool(options.include_usage)
    max_tokens = body.max_completion_tokens
    if max_tokens is None:
        max_tokens = body.max_tokens
    tools: list[Mapping[str, Any]] | None = None
    if body.tools is not None:
        if not all(isinstance(t.get("function"), Mapping) for t in body.tools):
            raise _bad("tools must be a list of {'type': 'function', 'function': {...}}.", "tools")
        for i, t in enumerate(body.tools):
            name = t["function"].get("name")
            if not isinstance(name, str) or not name:
                raise _bad(
                    f"tools[{i}].function.name must be a non-empty string, got {name!r}.", "tools"
                )
            params = t["function"].get("parameters")
            if params is not None and not isinstance(params, Mapping | bool):
                raise _bad(f"tools[{i}].function.parameters must be a JSON schema object.", "tools")
        tools = list(body.tools) or None
    tool_choice = body.tool_choice
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise _bad(
                f"tool_choice must be 'none', 'auto', 'required' or a named function, "
                f"got {tool_choice!r}.",
                "tool_choice",
            )
        if tool_choice == "required" and not tools:
            raise _bad("When using `tool_choice`, `tools` must be set.", "tool_choice")
    elif tool_choice is not None:
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if not tools:
            raise _bad("When using `tool_choice`, `tools` must be set.", "tool_choice")
        if not any(t["function"].get("name") == name for t in tools):
            raise _bad(
                f"The tool specified in `tool_choice` ({name!r}) does not match any of "
                "the specified `tools`.",
                "tool_choice",
            )
    tool_rounds = body.agentflow_tool_rounds
    if tool_rounds is not None and tool_rounds < 0:
        raise _bad("agentflow_tool_rounds must be ≥ 0.", "agentflow_tool_rounds")
    ptc = body.parallel_tool_calls
    return ChatParams(
        model=body.model,
        messages=list(messages),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=True if ptc is None else ptc,
        max_tokens=max_tokens,
        stop=body.stop,
        stream=stream,
        include_usage=include_usage,
        seed=body.seed,
        tool_rounds=tool_rounds,
    )


class TokenizeBody(msgspec.Struct, kw_only=True):
    """A ``POST /tokenize`` body (vLLM's): ``messages`` (rendered with the chat template)
    or a ``prompt`` string."""

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    return_token_strs: bool = False


_decode_tokenize = msgspec.json.Decoder(TokenizeBody).decode


#: The roles vLLM's chat template takes.
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Each message: a known string role, content a string, a list of parts or null,
    tool calls a list of ``{"function": {...}}`` objects, their arguments JSON text (vLLM's
    400s, its words)."""
    for i, m in enumerate(messages):
        role = m.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise _bad(
                f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}.", "messages"
            )
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(
                f"messages[{i}].content must be a string, a list of parts or null.", "messages"
            )
        calls = m.get("tool_calls")
        if calls is not None and (
            not isinstance(calls, list)
            or not all(isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
                       for c in calls)
        ):  # fmt: skip
            raise _bad(
                f"messages[{i}].tool_calls must be a list of {{'function': {{...}}}} objects.",
                "messages",
            )
        for j, c in enumerate(calls or ()):
            _check_arguments(c["function"].get("arguments"), f"messages[{i}].tool_calls[{j}]")


def _check_arguments(arguments: object, where: str) -> None:
    """A history call's arguments: vLLM ``json.loads`` each non-empty string (an empty one,
    or none, is ``{}``), and answers text that is no JSON with a 400. msgspec decodes
    first (twice as fast over a long history); ``json.loads`` judges only what it refuses
    (``NaN``, ``Infinity``, ``1e400``, which vLLM takes)."""
    if not isinstance(arguments, str) or not arguments:
        return
    try:
        msgspec.json.decode(arguments)
        return
    except (ValueError, RecursionError):  # (a lone surrogate: UnicodeEncodeError)
        pass
    try:
        json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        raise _bad(
            f"{where}.function.arguments is not valid JSON: {str(exc)[:200]}", "messages"
        ) from None


def decode_tokenize_body(raw: bytes) -> TokenizeBody:
    """Decode and check a ``POST /tokenize`` body.

    Raises:
        RequestRejected: a 400 — invalid JSON, a field of the wrong type, a message with
            no ``role``, or neither ``prompt`` nor ``messages``.
    """
    try:
        body = _decode_tokenize(raw)
    except msgspec.ValidationError as exc:
        raise _rejected(exc) from None
    except msgspec.DecodeError as exc:
        raise _bad(f"Invalid JSON body: {exc}") from None
    except RecursionError:
        raise _too_deep_json() from None
    check_nesting(body.messages, "messages")
    check_nesting(body.tools, "tools")
    if body.messages is not None:
        _check_messages(body.messages)
    elif body.prompt is None:
        raise _bad("Either `prompt` (a string) or `messages` is required.", "prompt")
    return body


def parse_request_id(request_id: str | int) -> int | None:
    """The engine id in ``chatcmpl-<n>`` (or ``<n>``), or ``None`` if it is not one.

    ``<n>`` is 1 to 18 ASCII digits: ``str.isdigit`` also takes ``'²'`` or ``'①'``,
    which ``int`` refuses, and ``int`` refuses more than 4,300 digits.
    """
    if isinstance(request_id, int):
        return request_id
    s = request_id.removeprefix("chatcmpl-")
    return int(s) if _REQUEST_ID.fullmatch(s) else None
