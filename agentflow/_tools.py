"""Tools from typed Python callables: the :class:`Tool`, the :func:`tool` decorator, and
calling one (arguments validated, a time limit, the result made text).

How a callable is described (its JSON schema, from the signature and the docstring) is
in ``_tool_schema.py``; how a result that is not a ``str`` is made text, in
``_tool_text.py``; the call itself (its worker thread, its time limit, what it raised),
in ``_tool_call.py``. A tool's ``tools`` entry is built once, canonically (keys sorted at
every level), so an agent sends byte-identical tool schemas on every turn of every
session however the schema was put together — the server's prefix cache keeps hitting them
(``docs/prefix-reuse.md``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import msgspec

from agentflow._callables import is_async
from agentflow._counts import check_count
from agentflow._errors import ConfigError, ToolError
from agentflow._tool_call import call_tool
from agentflow._tool_schema import canonical_json_value, check_tool, describe

if TYPE_CHECKING:
    import pydantic

__all__ = ["DEFAULT_TOOL_TIMEOUT_S", "Tool", "tool"]


#: How long a tool call may run, in seconds, unless its tool or agent says otherwise.
DEFAULT_TOOL_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A function the model may call.

    Build one with :func:`tool` (or :meth:`Tool.from_function`) rather than by hand.

    Attributes:
        name: the name the model calls it by.
        description: what it does, for the model.
        parameters: the JSON schema of its arguments.
        fn: the callable (sync or async). It is async, and runs on the event loop, when it is
            an ``async def``, an object with an ``async def __call__``, or a sync wrapper of
            one made with ``functools.wraps`` (its ``__wrapped__`` is followed), as for
            callbacks.
        in_thread: run a sync ``fn`` in a daemon thread (agentflow's pool), so a slow tool cannot
            stall the event loop (and every other agent's token timing with it), and a
            stuck one cannot keep the process from exiting.
        timeout_s: how long one call may run, in seconds; ``None`` takes the agent's
            ``tool_timeout_s`` (:data:`DEFAULT_TOOL_TIMEOUT_S` when called directly);
            ``math.inf`` means no limit. A call that runs out is a :class:`ToolTimeout`.
            An async tool that catches the cancellation and returns late is timed out
            all the same. A timed-out sync tool's thread keeps running until the function
            returns (Python cannot stop a thread); a sync tool with ``in_thread=False``
            blocks the event loop, so its limit cannot fire until it returns.
        max_output_chars: the most characters of one result sent to the model; ``None``
            takes the agent's ``max_tool_output_chars``. Longer output is cut, and a
            marker line saying how much was cut is appended.
        replay_on_resume: when a recorded run is resumed (``docs/store.md``), call this
            tool again with every call of it the session recorded, in order, before the
            session continues: for tools whose effect lives in the process's memory (an
            in-memory file edit), so that the resumed process has it too. Their outputs
            are discarded (the recorded ones stand). Leave it off for tools with outside
            effects (a payment, a file on disk): those must not run twice.

    Tools are hashable, and two tools of one function with the same options are equal
    (``tool(f) == tool(f)``).

    The ``tools`` entry (:meth:`spec`) is computed once, when the tool is made, from a
    canonical deep copy of ``name``, ``description`` and ``parameters``: changing the
    ``parameters`` dict afterwards has no effect (make a new tool instead).

    Raises:
        ConfigError: ``name`` is empty, not a ``str``, holds whitespace or a control
            character, or is generated (a lambda's ``<lambda>``: pass ``name=``; a name
            outside OpenAI's rule — 1 to 64 letters, digits, ``_`` or ``-`` — is only
            logged), ``description`` is not a ``str``, ``fn`` is not callable;
            ``parameters`` is not a JSON object with string keys, or holds a value JSON
            cannot carry.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    in_thread: bool = True
    timeout_s: float | None = None
    max_output_chars: int | None = None
    replay_on_resume: bool = False
    # Not compared: each description generates a model class of its own, and two tools of
    # one function are equal (the fields above say all the model holds).
    _args_model: type[pydantic.BaseModel] | None = field(default=None, repr=False, compare=False)
    _spec: dict[str, Any] = field(init=False, repr=False, compare=False)
    # Compared: whether its arguments are validated (a described tool's are, a hand-built
    # one's are not), so two tools that would treat a call differently are not equal.
    _validated: bool = field(init=False, repr=False)
    # Whether a call runs in a worker thread: a sync fn with in_thread (decided once).
    _threaded: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tool(self.name, self.description, self.fn)
        if self.timeout_s is not None:
            check_timeout(self.timeout_s, f"tool {self.name!r}: timeout_s")
        if self.max_output_chars is not None:
            check_output_cap(self.max_output_chars, f"tool {self.name!r}: max_output_chars")
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
            msgspec.json.encode(spec)  # what the wire will carry: encodable
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            raise ConfigError(f"tool {self.name!r}: the schema is not JSON: {exc}") from exc
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_validated", self._args_model is not None)
        object.__setattr__(self, "_threaded", self.in_thread and not is_async(self.fn))

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        in_thread: bool = True,
        timeout_s: float | None = None,
        max_output_chars: int | None = None,
        replay_on_resume: bool = False,
    ) -> Tool:
        """Describe ``fn`` as a tool from its signature, type hints and docstring.

        A ``functools.partial`` is described by the function it wraps (its name, hints
        and docstring), less the arguments it binds: those are fixed, not the model's.

        Raises:
            ConfigError: a parameter has no type hint, or one no JSON schema can describe
                (a socket, a callable: it used to be pydantic's own error), is
                ``*args``/``**kwargs``, is positional-only (the model's arguments are
                passed by name) or starts with ``_`` (no schema field can); or
                ``timeout_s`` / ``max_output_chars`` is not a positive number.
        """
        described = describe(fn, name=name, description=description)
        return cls(
            name=described.name,
            description=described.description,
            parameters=described.parameters,
            fn=fn,
            in_thread=in_thread,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            replay_on_resume=replay_on_resume,
            _args_model=described.args_model,
        )

    def _with_function(self, fn: Callable[..., Any]) -> Tool:
        """This tool calling ``fn`` instead: the same name, schema, options and argument
        model, shared rather than described and checked again (``fn`` must take the same
        arguments). For many copies of one tool bound to different state (the demo's
        tools over each agent's own repository): describing a function costs
        milliseconds, this does not."""
        if not callable(fn):
            raise ConfigError(f"tool {self.name!r}: fn must be callable, got {type(fn).__name__}")
        new = object.__new__(type(self))
        for name in self.__slots__:
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, "fn", fn)
        object.__setattr__(new, "_threaded", self.in_thread and not is_async(fn))
        return new

    def __hash__(self) -> int:
        # Equal tools have equal names (``parameters`` is a dict, unhashable; a hash of
        # its JSON told 1 from 1.0, which compare equal): a tool can go in a set.
        return hash(self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        # A tool built from a function holds a generated pydantic model (not picklable):
        # it is pickled as its function and options and described again when unpickled
        # (``Fleet(workers=N)`` sends agents to worker processes this way).
        return (
            _unpickle_tool,
            (
                self.name,
                self.description,
                self.parameters,
                self.fn,
                self.in_thread,
                self.timeout_s,
                self.max_output_chars,
                self.replay_on_resume,
                self._args_model is not None,
            ),
        )

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool, in canonical form.

        Keys are sorted at every level (lists keep their order), so the entry encodes to
        the same bytes whatever order the schema was built in. It is computed once and
        the same object is returned on every call: treat it as read-only.
        """
        return self._spec

    async def invoke(
        self,
        arguments: str | bytes | bytearray,
        *,
        default_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    ) -> str:
        """Validate the model's JSON ``arguments``, call the tool, return its result as text.

        The call may run for the tool's ``timeout_s``, or ``default_timeout_s`` when the
        tool sets none (a session passes its agent's ``tool_timeout_s``). The result is
        returned whole: the session applies ``max_output_chars``.

        Raises:
            ToolTimeout: the call did not return in time (a :class:`ToolError`).
            ToolError: the arguments do not fit the schema, or the tool raised (any
                exception, ``SystemExit`` and ``GeneratorExit`` included; not
                ``KeyboardInterrupt``, unless a sync tool raised it in its worker thread,
                where no Ctrl-C arrives), or it returned an iterator (a generator: return
                a list).
            ConfigError: ``arguments`` is not a ``str`` (or its UTF-8 ``bytes`` or
                ``bytearray``) but a dict or ``None``, say, or
                ``default_timeout_s`` is not a number of seconds > 0.
        """
        import pydantic

        check_timeout(default_timeout_s, "Tool.invoke: default_timeout_s")
        if not isinstance(arguments, str | bytes | bytearray):  # a dict was a bare AttributeError
            raise ConfigError(
                f"tool {self.name!r}: Tool.invoke takes the arguments as the model's JSON "
                f"text (a str, json.dumps(...) of a dict), got {type(arguments).__name__}"
            )
        try:
            kwargs = self._parse(arguments)
        except (pydantic.ValidationError, ValueError) as exc:
            raise ToolError(
                f"tool {self.name!r} got arguments it cannot take: {exc}", tool=self.name
            ) from exc
        limit = self.timeout_s if self.timeout_s is not None else default_timeout_s
        return await call_tool(
            self.fn, kwargs, name=self.name, limit=limit, threaded=self._threaded
        )

    def _parse(self, arguments: str | bytes | bytearray) -> dict[str, Any]:
        raw = arguments.strip() or "{}"
        if self._args_model is None:
            try:
                value = msgspec.json.decode(raw)
            except RecursionError:  # msgspec's limit (~1000 levels) is no DecodeError
                raise ValueError("arguments nested too deep to decode") from None
            if not isinstance(value, dict):
                raise ValueError("arguments must be a JSON object")
            return value
        parsed = self._args_model.model_validate_json(raw)
        # The fields are named p0, p1, ...; the parameters' names are their aliases.
        return {
            info.alias or key: getattr(parsed, key)
            for key, info in type(parsed).model_fields.items()
        }


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    in_thread: bool = True,
    timeout_s: float | None = None,
    max_output_chars: int | None = None,
    replay_on_resume: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    in_thread: bool = True,
    timeout_s: float | None = None,
    max_output_chars: int | None = None,
    replay_on_resume: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: turn a typed function into a :class:`Tool`.

    Use as ``@tool``, ``@tool(name="search")`` or ``@tool(timeout_s=30)``.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f,
            name=name,
            description=description,
            in_thread=in_thread,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            replay_on_resume=replay_on_resume,
        )

    return wrap if fn is None else wrap(fn)


def _unpickle_tool(
    name: str,
    description: str,
    parameters: dict[str, Any],
    fn: Callable[..., Any],
    in_thread: bool,
    timeout_s: float | None,
    max_output_chars: int | None,
    replay_on_resume: bool,
    described: bool,
) -> Tool:
    options: dict[str, Any] = {
        "in_thread": in_thread,
        "timeout_s": timeout_s,
        "max_output_chars": max_output_chars,
        "replay_on_resume": replay_on_resume,
    }
    if described:
        return Tool.from_function(fn, name=name, description=description, **options)
    return Tool(name=name, description=description, parameters=parameters, fn=fn, **options)


def as_tool(obj: Tool | Callable[..., Any] | Callable[..., Awaitable[Any]]) -> Tool:
    """A :class:`Tool` as is; a plain callable described by :meth:`Tool.from_function`."""
    return obj if isinstance(obj, Tool) else Tool.from_function(obj)


def check_timeout(value: object, where: str) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a number of seconds > 0 (``inf`` ok)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where} must be a number of seconds > 0, got {value!r}")


def check_output_cap(value: object, where: str) -> None:
    """Raise :class:`ConfigError` unless ``value`` is an int ≥ 1 (a number of characters)."""
    check_count(value, where)
