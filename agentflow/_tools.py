"""Tools from typed Python callables.

The JSON schema comes from the signature (through a pydantic model, which also
validates the model's arguments) and the descriptions from the docstring (its
summary, and an ``Args:`` / ``:param`` / numpydoc section for each parameter).

A tool's ``tools`` entry is built once, canonically (keys sorted at every level), so
an agent sends byte-identical tool schemas on every turn of every session however
the schema was put together — the server's prefix cache keeps hitting them
(``docs/prefix-reuse.md``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

import docstring_parser
import msgspec
import pydantic

from agentflow._errors import ConfigError, ToolError

__all__ = ["Tool", "tool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A function the model may call.

    Build one with :func:`tool` (or :meth:`Tool.from_function`) rather than by hand.

    Attributes:
        name: the name the model calls it by.
        description: what it does, for the model.
        parameters: the JSON schema of its arguments.
        fn: the callable (sync or async).
        in_thread: run a sync ``fn`` in a worker thread, so a slow tool cannot stall the
            event loop (and every other agent's token timing with it).

    The ``tools`` entry (:meth:`spec`) is computed once, when the tool is made, from a
    canonical deep copy of ``name``, ``description`` and ``parameters``: changing the
    ``parameters`` dict afterwards has no effect (make a new tool instead).

    Raises:
        ConfigError: ``parameters`` is not a JSON object with string keys, or holds a
            value JSON cannot carry.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    in_thread: bool = True
    _args_model: type[pydantic.BaseModel] | None = field(default=None, repr=False)
    _spec: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.parameters, dict):
            raise ConfigError(
                f"tool {self.name!r}: parameters must be a JSON schema object (a dict), "
                f"got {type(self.parameters).__name__}"
            )
        spec = canonical_json_value(
            {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            },
            where=f"tool {self.name!r}",
        )
        try:
            msgspec.json.encode(spec)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            raise ConfigError(f"tool {self.name!r}: the schema is not JSON: {exc}") from exc
        object.__setattr__(self, "_spec", spec)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        in_thread: bool = True,
    ) -> Tool:
        """Describe ``fn`` as a tool from its signature, type hints and docstring.

        Raises:
            ConfigError: a parameter has no type hint, or is ``*args``/``**kwargs``.
        """
        tool_name = name or fn.__name__
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        param_docs = {p.arg_name: p.description or "" for p in doc.params}
        try:
            hints = get_type_hints(fn)
        except NameError as exc:
            raise ConfigError(f"tool {tool_name!r}: cannot resolve a type hint: {exc}") from exc
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {tool_name!r}: *{pname} parameters cannot be described")
            if pname not in hints:
                raise ConfigError(f"tool {tool_name!r}: parameter {pname!r} needs a type hint")
            default = ... if param.default is param.empty else param.default
            fields[pname] = (
                hints[pname],
                pydantic.Field(default, description=param_docs.get(pname) or None),
            )
        model = pydantic.create_model(
            f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        schema = _strip_titles(model.model_json_schema())
        schema.setdefault("properties", {})
        desc = description or "\n\n".join(
            s for s in (doc.short_description, doc.long_description) if s
        )
        return cls(
            name=tool_name,
            description=desc,
            parameters=schema,
            fn=fn,
            in_thread=in_thread,
            _args_model=model,
        )

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool, in canonical form.

        Keys are sorted at every level (lists keep their order), so the entry encodes to
        the same bytes whatever order the schema was built in. It is computed once and
        the same object is returned on every call: treat it as read-only.
        """
        return self._spec

    async def invoke(self, arguments: str) -> str:
        """Validate the model's JSON ``arguments``, call the tool, return its result as text.

        Raises:
            ToolError: the arguments do not fit the schema, or the tool raised.
        """
        try:
            kwargs = self._parse(arguments)
        except (pydantic.ValidationError, ValueError) as exc:
            raise ToolError(
                f"tool {self.name!r} got arguments it cannot take: {exc}", tool=self.name
            ) from exc
        try:
            if inspect.iscoroutinefunction(self.fn):
                result = await self.fn(**kwargs)
            elif self.in_thread:
                result = await asyncio.to_thread(self.fn, **kwargs)
            else:
                result = self.fn(**kwargs)
                if inspect.isawaitable(result):
                    result = await result
        except Exception as exc:
            raise ToolError(
                f"tool {self.name!r} raised {type(exc).__name__}: {exc}", tool=self.name
            ) from exc
        return result if isinstance(result, str) else _to_text(result)

    def _parse(self, arguments: str) -> dict[str, Any]:
        raw = arguments.strip() or "{}"
        if self._args_model is None:
            value = msgspec.json.decode(raw)
            if not isinstance(value, dict):
                raise ValueError("arguments must be a JSON object")
            return value
        parsed = self._args_model.model_validate_json(raw)
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, in_thread: bool = True
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    in_thread: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: turn a typed function into a :class:`Tool`.

    Use as ``@tool`` or ``@tool(name="search")``.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, in_thread=in_thread)

    return wrap if fn is None else wrap(fn)


def as_tool(obj: Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]) -> Tool:
    """A :class:`Tool` as is; a plain callable described by :meth:`Tool.from_function`."""
    return obj if isinstance(obj, Tool) else Tool.from_function(obj)


def canonical_json_value(value: Any, *, where: str = "value") -> Any:
    """A deep copy of a JSON value with every object's keys in sorted order.

    Lists and tuples become lists in their own order (order is meaning there); strings,
    numbers, booleans and ``None`` are kept. Encoded by msgspec (compact separators, dict
    order preserved), equal values give equal bytes.

    Raises:
        ConfigError: an object key is not a string (JSON has no other keys).
    """
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ConfigError(f"{where}: JSON object keys must be strings, got {key!r}")
        return {k: canonical_json_value(value[k], where=where) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical_json_value(v, where=where) for v in value]
    return value


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _to_text(value: Any) -> str:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump_json()
    return msgspec.json.encode(value, enc_hook=str).decode()
