"""What the model sees of a tool: a typed callable described as a JSON schema, canonically.

The schema comes from the signature (through a pydantic model, which also validates the
model's arguments) and the descriptions from the docstring (its summary, and an
``Args:`` / ``:param`` / numpydoc section for each parameter); an
``Annotated[T, pydantic.Field(...)]`` hint keeps its constraints and description, and so
does a ``pydantic.Field(...)`` default (``n: int = Field(3, ge=1)``). A
tool's ``tools`` entry is built from :func:`canonical_json_value` (keys sorted at every
level), so equal schemas encode to equal bytes (``docs/prefix-reuse.md``). Calling a tool is
``_tools.py``'s.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, get_type_hints

import docstring_parser

from agentflow._errors import ConfigError
from agentflow._logging import get_logger

if TYPE_CHECKING:
    import pydantic

__all__ = ["Description", "canonical_json_value", "check_tool", "describe"]

#: OpenAI's rule for a tool name: letters, digits, ``_`` and ``-``, 1 to 64. Other
#: servers (vLLM, llama.cpp) take more (``web.search``, ``fs:read``, MCP's and Gemini's
#: namespaced names): a name outside it is logged, not refused.
_OPENAI_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_warned_names: set[str] = set()  # logged once per name, however many tools bear it
_log = get_logger("agentflow.tools")


class Description(NamedTuple):
    """A callable described as a tool: what :meth:`Tool.from_function` builds it from."""

    name: str
    description: str
    parameters: dict[str, Any]
    args_model: type[pydantic.BaseModel]


def describe(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    annotated: bool = True,
    field_defaults: bool = True,
) -> Description:
    """Describe ``fn`` as a tool from its signature, type hints and docstring.

    A ``functools.partial`` is described by the function it wraps (its name, hints and
    docstring), less the arguments it binds: those are fixed, not the model's. ``name``
    and ``description``, when given, replace the ones found. ``annotated=False``
    describes it as releases before stop 36 did, leaving out what ``Annotated[...]``
    hints add (constraints, descriptions): the schemas that runs recorded then were
    fingerprinted with (``store/_codec.py``). ``field_defaults=False`` describes a
    ``pydantic.Field(...)`` default as releases before stop 40 did: a plain default,
    left out of the schema with its constraints (as ``annotated=False`` does too).

    Raises:
        ConfigError: ``fn`` is not callable; a parameter has no type hint, or one no
            JSON schema can describe (a socket, a callable) or one that needs a package
            not installed (``EmailStr`` without email-validator), is ``*args``/``**kwargs``,
            is positional-only (the model's arguments are passed by name) or starts with
            ``_`` (no schema field can).
    """
    import pydantic  # here, not at import: `import agentflow` does not load it
    from pydantic.fields import FieldInfo

    if not callable(fn):
        raise ConfigError(f"tool {name or fn!r}: {fn!r} is not callable")
    target = fn  # what the name, docstring and hints come from
    bound: frozenset[str] = frozenset()
    while isinstance(target, functools.partial):
        bound |= set(target.keywords)
        target = target.func
    described = target
    if not hasattr(target, "__name__"):  # a callable object: described by its __call__
        described = getattr(target, "__call__")  # noqa: B004, B009 - mypy sees only Callable
    tool_name = name or getattr(target, "__name__", None) or type(target).__name__
    check_tool_name(tool_name)  # before it names the arguments' model
    doc = docstring_parser.parse(inspect.getdoc(target) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    try:
        hints = get_type_hints(described, include_extras=annotated)  # Annotated[..] kept
    except NameError as exc:
        raise ConfigError(f"tool {tool_name!r}: cannot resolve a type hint: {exc}") from exc
    # A partial's signature leaves out the arguments it binds by position; those it
    # binds by keyword stay in it (as defaults) and are left out here.
    try:
        signature = inspect.signature(fn if target is not fn else described)
    except (TypeError, ValueError) as exc:  # a partial binding what fn does not take
        raise ConfigError(f"tool {tool_name!r}: cannot read the signature: {exc}") from exc
    fields: dict[str, Any] = {}
    for pname, param in signature.parameters.items():
        if pname in bound:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"tool {tool_name!r}: *{pname} parameters cannot be described")
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(
                f"tool {tool_name!r}: parameter {pname!r} is positional-only (before '/'); "
                "a tool's arguments are passed by name: drop the '/'"
            )
        if pname.startswith("_"):
            raise ConfigError(
                f"tool {tool_name!r}: parameter {pname!r} starts with '_', which no "
                "schema field can: rename it"
            )
        if pname not in hints:
            raise ConfigError(f"tool {tool_name!r}: parameter {pname!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        hint = hints[pname]
        if annotated and field_defaults and isinstance(default, FieldInfo):
            # ``n: int = Field(3, ge=1)`` (pydantic's idiom for validate_call): the Field
            # is the field's own, its default and constraints with it, as if the hint were
            # ``Annotated[int, Field(3, ge=1)]``. As a plain default it was dropped from
            # the schema, and the tool called with the FieldInfo when the model omitted n.
            hint, default = Annotated[hint, default], ...
        # The docstring's description, when it has one; an explicit description=None
        # would wipe the one of an ``Annotated[int, Field(description=...)]`` hint.
        doc_says = param_docs.get(pname)
        # Each field is named p0, p1, ... and the parameter's name is its alias (in the
        # schema, and in the arguments validated): any name a function may take works,
        # those of the model's own attributes too (``model_config``, ``json``, ``schema``).
        if doc_says:
            info = pydantic.Field(default, alias=pname, description=doc_says)
        else:
            info = pydantic.Field(default, alias=pname)
        fields[f"p{len(fields)}"] = (hint, info)
    try:
        model, schema = _model(pydantic, tool_name, fields)
    except pydantic.PydanticUserError as exc:  # a type pydantic cannot describe
        raise ConfigError(_undescribable(pydantic, tool_name, fields, exc)) from exc
    except ImportError as exc:  # a type needing a package not installed (EmailStr)
        raise ConfigError(_undescribable(pydantic, tool_name, fields, exc)) from exc
    schema.setdefault("properties", {})
    desc = description or "\n\n".join(s for s in (doc.short_description, doc.long_description) if s)
    return Description(tool_name, desc, schema, model)


def _model(
    pydantic: Any, tool_name: str, fields: dict[str, Any]
) -> tuple[type[pydantic.BaseModel], dict[str, Any]]:
    """The arguments' model of ``fields`` and its JSON schema (titles left out)."""
    model = pydantic.create_model(
        f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model, _strip_titles(model.model_json_schema())


def _undescribable(pydantic: Any, tool_name: str, fields: dict[str, Any], exc: Exception) -> str:
    """Why ``fields`` have no schema, naming the first parameter that has none on its own
    (pydantic's own message names a type, and advises a model setting a tool has not)."""
    for key, (hint, info) in fields.items():
        pname = info.alias
        try:
            _model(pydantic, tool_name, {key: (hint, info)})
        except ImportError as own:
            return (
                f"tool {tool_name!r}: parameter {pname!r} has a type that needs a package "
                f"not installed, {_shown(hint)}: {own}"
            )
        except pydantic.PydanticUserError as own:
            shown = _shown(hint)
            if own.code == "typed-dict-version":  # pydantic's remedy is the one to give
                return (
                    f"tool {tool_name!r}: parameter {pname!r} has a type pydantic cannot "
                    f"describe on this Python, {shown}: {own.message}"
                )
            return (
                f"tool {tool_name!r}: parameter {pname!r} has a type no JSON schema can "
                f"describe, {shown} ({type(exc).__name__}): the model sends JSON arguments — "
                "use str, int, float, bool, a list or dict of those, a Literal, an Enum, a "
                "dataclass or a pydantic model"
            )
    return f"tool {tool_name!r}: its parameters have no JSON schema: {exc}"


def _shown(hint: Any) -> Any:
    return f"{hint.__module__}.{hint.__qualname__}" if isinstance(hint, type) else hint


def check_tool(name: object, description: object, fn: object) -> None:
    """Raise :class:`ConfigError` unless ``name`` is a tool name a server can take
    (:func:`check_tool_name`), ``description`` a ``str`` and ``fn`` callable: what
    :class:`Tool` checks when it is made, not each time it is sent."""
    check_tool_name(name)
    if not isinstance(description, str):
        raise ConfigError(
            f"tool {name!r}: description must be a str, got {type(description).__name__}"
        )
    if not callable(fn):
        raise ConfigError(f"tool {name!r}: fn must be callable, got {type(fn).__name__}")


def check_tool_name(name: object) -> None:
    """Raise :class:`ConfigError` unless ``name`` is a tool name a server can take: a
    non-empty ``str`` of printable characters without whitespace, not a generated name
    such as a lambda's ``<lambda>``. A name outside OpenAI's rule (1 to 64 letters,
    digits, ``_`` or ``-``) is logged once: OpenAI's API refuses it, other servers take
    it."""
    if (
        not isinstance(name, str)
        or not name.isprintable()
        or name.startswith("<")
        or any(c.isspace() for c in name)
        or not name
    ):
        hint = ": pass name= (@tool(name=...), Tool.from_function(fn, name=...))"
        raise ConfigError(
            "tool name must be a non-empty str of printable characters without whitespace "
            f"(OpenAI's API takes 1 to 64 letters, digits, '_' or '-'), got {name!r:.80}"
            + (hint if isinstance(name, str) and name.startswith("<") else "")
        )
    if not _OPENAI_TOOL_NAME.fullmatch(name) and name not in _warned_names:
        _warned_names.add(name)
        _log.warning(
            "tool.name_outside_openai_rule",
            tool=name[:80],
            hint="OpenAI's API refuses it (1 to 64 letters, digits, '_' or '-'); "
            "vLLM and llama.cpp take it",
        )


def canonical_json_value(value: Any, *, where: str = "value", at: str = "") -> Any:
    """A deep copy of a JSON value with every object's keys in sorted order.

    Lists and tuples become lists in their own order (order is meaning there); strings,
    numbers, booleans and ``None`` are kept. Encoded by msgspec (compact separators, dict
    order preserved), equal values give equal bytes. ``at`` is the path of ``value``
    inside what ``where`` names, for the errors.

    Raises:
        ConfigError: an object key is not a string (JSON has no other keys), or a number
            is infinite or NaN (JSON has no form for it: msgspec sent it as ``null``, and
            ``json.dumps`` as ``Infinity``, which is not JSON) — e.g. a tool parameter's
            default ``float("inf")``.
    """
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ConfigError(f"{where}: JSON object keys must be strings, got {key!r}")
        return {
            k: canonical_json_value(value[k], where=where, at=f"{at}.{k}" if at else k)
            for k in sorted(value)
        }
    if isinstance(value, list | tuple):
        return [canonical_json_value(v, where=where, at=f"{at}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"{where}: {value!r} at {at or 'the top'} has no JSON form (JSON has no "
            "Infinity or NaN): use a finite number, or None as the default"
        )
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
