"""A tool's result that is not a ``str``, as the text the model reads (``_tools.py``
calls it after the tool returns): bytes decoded, scalars as their text, the rest JSON,
with any lone surrogate mended (:func:`~agentflow._sendable.sendable_text`); an iterator
(a generator) is the tool's error, not its ``repr``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import msgspec

from agentflow._errors import ToolError
from agentflow._sendable import sendable_text

__all__ = ["to_text"]


def to_text(value: Any, *, tool: str) -> str:
    """Tool ``tool``'s non-``str`` result as the text the model reads.

    Bytes (``subprocess.check_output``, a file read in ``"rb"``) are text in UTF-8, an
    undecodable byte becoming U+FFFD: as JSON they would be base64 in quotes. Objects,
    lists and pydantic models (inside those too) are JSON. A scalar JSON has no form for
    but a string (a ``Path``, a ``Decimal``, a ``UUID``, a ``datetime``) is that string's
    text, without the quotes a JSON string would add; ``None``, booleans and numbers
    stay JSON (``null``, ``true``).

    Raises:
        ToolError: ``value`` is an iterator: a generator (a ``yield`` in the tool), an
            async generator, ``map``, ``filter``, ``iter(...)``, an open file. It used to
            reach the model as its ``repr`` (``<generator object ... at 0x...>``), a
            successful result; it is not consumed here, as it may never end.
    """
    if isinstance(value, Iterator | AsyncIterator):
        raise ToolError(
            f"tool {tool!r} returned an iterator ({type(value).__name__}), which agentflow "
            "does not consume (it may never end): return a list (or a str) instead",
            tool=tool,
        )
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    pd = sys.modules.get("pydantic")  # no pydantic loaded: no pydantic model either
    if pd is not None and isinstance(value, pd.BaseModel):
        from pydantic_core import PydanticSerializationError  # loaded with pydantic

        try:
            return str(value.model_dump_json())
        except PydanticSerializationError:  # a lone surrogate, say: mended below
            value = value.model_dump(mode="json")
    enc_hook = _enc_hook(pd)
    try:
        text = msgspec.json.encode(value, enc_hook=enc_hook).decode()
    except UnicodeEncodeError:
        # A lone surrogate (os.listdir of an undecodable file name) is mended as in a str
        # result, U+FFFD (it used to make the result an error); the rest as it would be.
        text = msgspec.json.encode(
            _sendable(msgspec.to_builtins(value, enc_hook=enc_hook))
        ).decode()
    if text.startswith('"'):  # a scalar that became a JSON string: its text
        return msgspec.json.decode(text, type=str)
    return text


def _enc_hook(pd: Any) -> Callable[[Any], Any]:
    """msgspec's hook for what it cannot encode itself: a pydantic model (in a list, a
    dict, a dataclass) as its JSON form — as ``str`` it reached the model as its Python
    ``repr``-like text — anything else as its ``str``; so is a model with no JSON form
    (non-UTF-8 ``bytes``, an arbitrary-type field), as it was before models became JSON,
    not an error. ``pd`` is the pydantic module, or ``None`` when none is loaded (then no
    value is a model): looked up once per result, not once per object encoded."""
    if pd is None:
        return str
    # A model's class is made by pydantic's metaclass: checking that is a plain type
    # check, where isinstance(value, BaseModel) goes through ABCMeta's (slower).
    model_class = type(pd.BaseModel)

    def hook(value: Any) -> Any:
        if isinstance(type(value), model_class):
            try:
                return value.model_dump(mode="json")
            except Exception:  # any serializer's failure: its str, as before
                return str(value)
        return str(value)

    return hook


def _sendable(value: Any) -> Any:
    """``value`` (``msgspec.to_builtins``' output) with each string, keys too, made
    :func:`~agentflow._sendable.sendable_text`."""
    if isinstance(value, str):
        return sendable_text(value)
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sendable(v) for v in value]
    return value
