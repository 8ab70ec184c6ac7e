"""The :class:`Agent`: what a model is told, what it may call, and how it samples."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._seconds import shown
from agentflow._sendable import check_sendable
from agentflow._session_checks import PARAMS_RESERVED, check_header_text
from agentflow._tools import (
    DEFAULT_TOOL_TIMEOUT_S,
    Tool,
    as_tool,
    check_output_cap,
    check_timeout,
)

if TYPE_CHECKING:
    from agentflow._session import Session, SessionResult
    from agentflow.typing import ContextLink, Transport

__all__ = ["Agent"]


def output_size(params: Mapping[str, Any]) -> int | None:
    """The most output tokens a request with ``params`` asks for: ``max_completion_tokens``
    when set, else ``max_tokens`` (what OpenAI, vLLM, SGLang and the simulator use), or
    ``None``. A value that is not a count (an int of at least 1) counts as unset.

    The one reading: :attr:`Agent.max_output_tokens` (what the scheduler charges) and a
    context budget's output reserve both use it, so the two never disagree.
    """
    for key in ("max_completion_tokens", "max_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None


#: The largest :attr:`Agent.priority` (and the most negative, negated): a 32-bit int.
MAX_PRIORITY = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """A reusable agent definition; sessions are conversations with it.

    Args:
        name: a label for logs, events and reports.
        model: the model name the server serves.
        instructions: the system prompt, sent first in every request, byte for byte.
        tools: :class:`Tool` objects or typed callables (described from their signature).
            They are kept, and sent, in name order whatever order they are given in: the
            tool list is part of every session's prompt prefix, and agents built with the
            same tools in another order (from a set, a dict, a plugin registry) would
            otherwise bust each other's prefix cache from the first moved tool on.
            ``agent.tools`` is that name-sorted ``tuple`` of :class:`Tool`.
        params: sampling and other body fields: ``temperature``, ``max_tokens``, …
        max_turns: the most model turns one session may take.
        tool_errors: ``"return"`` sends a failed tool's error to the model as its result
            (the model can recover); ``"raise"`` ends the session with a :class:`ToolError`.
            A call that runs past its time limit is a :class:`ToolTimeout`, handled the same way.
        tool_timeout_s: how long one tool call may run, in seconds (default
            :data:`DEFAULT_TOOL_TIMEOUT_S`, 300); a tool's own ``timeout_s`` overrides it;
            ``math.inf`` means no limit.
        max_tool_output_chars: the most characters of one tool result sent to the model;
            longer results are cut to their first ``max_tool_output_chars`` characters
            and a marker line is appended. A tool's own ``max_output_chars`` overrides
            it; ``None`` (the default) sends results whole.
        context: what runs before and after each model turn of a session: one context
            link, or a list of them run in order (a
            :class:`~agentflow.context.ContextChain`), e.g. ``[FleetBudget(...),
            ContextBudget(window=...), CacheBusterCheck()]``; ``None`` sends history
            unchecked. A list is kept as the chain it makes: ``agent.context`` is one link
            (or ``None``).
        priority: the scheduling class of this agent's turns (higher goes first under
            priority-aware policies): an int of at most :data:`MAX_PRIORITY` either way.

    Agents are hashable (by name and model), so they can key a dict
    or go in a set; two agents are equal when every field above is.

    The fields are typed as an agent holds them (``tools: tuple[Tool, ...]``, ``context:
    ContextLink | None``); ``Agent(...)`` takes the forms above. ``dataclasses.replace``
    takes them too at run time, but a type checker reads the fields' types there: pass
    a tuple of tools and one link (``ContextChain([...])`` for several).

    A subclass (``@dataclass(frozen=True, kw_only=True) class MyAgent(Agent)``, adding
    fields) hashes as an agent does, by name and model — unless it defines ``__eq__``
    or ``__hash__`` itself (``unsafe_hash=True`` is refused: the hash is given). Its
    ``__init__`` is generated from the fields, so a type checker reads those types there
    too: pass ``tools=(tool(fn), ...)`` (:func:`~agentflow.tool`) and one context link.
    """

    name: str
    model: str
    instructions: str = ""
    tools: tuple[Tool, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int = 10
    tool_errors: Literal["return", "raise"] = "return"
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_tool_output_chars: int | None = None
    context: ContextLink | None = None
    priority: int = 0
    #: Identifies the prompt prefix every session of this agent shares (its model,
    #: instructions and tool schemas); sessions with equal keys are scheduled and routed
    #: together. The model is part of it: agents with the same instructions on two models
    #: (a base model and its LoRA adapter) can never share a server's KV cache.
    prefix_key: str | None = field(init=False, default=None, compare=False)
    #: Characters of the tool schemas as sent (for cheap prompt estimates, computed once).
    tool_chars: int = field(init=False, default=0, compare=False)
    #: The tool schemas as compact, key-sorted JSON (computed once: the store's agent
    #: fingerprint holds it).
    tool_specs_json: str = field(init=False, default="[]", compare=False, repr=False)

    if TYPE_CHECKING:
        # What ``Agent(...)`` takes, for type checkers: the generated ``__init__``, whose
        # ``tools`` and ``context`` take more than the fields hold once ``__post_init__``
        # has made them a name-sorted tuple of tools and one link (a list, a chain).
        # The fields are typed as they are read, so ``agent.tools`` is ``Tool``s without a
        # cast. tests/test_agent_typing.py checks that this matches the generated one.
        # It never runs: ``params``' default is the one each agent gets (a new dict), as
        # the API reference shows it.
        def __init__(
            self,
            *,
            name: str,
            model: str,
            instructions: str = "",
            tools: Collection[Tool | Callable[..., Any]] = (),
            params: Mapping[str, Any] = {},
            max_turns: int = 10,
            tool_errors: Literal["return", "raise"] = "return",
            tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
            max_tool_output_chars: int | None = None,
            context: ContextLink | Sequence[Any] | None = None,
            priority: int = 0,
        ) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"Agent.name must be a non-empty string, got {self.name!r}")
        # It starts every session id the agent makes ("<name>-<n>"), sent in a header.
        check_header_text(self.name, f"Agent.name {self.name!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(
                f"Agent {self.name!r}: model must be a non-empty string, got {self.model!r:.60}"
            )
        check_count(self.max_turns, f"Agent {self.name!r}: max_turns")
        if self.tool_errors not in ("return", "raise"):
            raise ConfigError(
                f"Agent {self.name!r}: tool_errors must be 'return' or 'raise', "
                f"got {self.tool_errors!r}"
            )
        check_timeout(self.tool_timeout_s, f"Agent {self.name!r}: tool_timeout_s")
        if self.max_tool_output_chars is not None:
            check_output_cap(
                self.max_tool_output_chars, f"Agent {self.name!r}: max_tool_output_chars"
            )
        if not isinstance(self.instructions, str):
            raise ConfigError(
                f"Agent {self.name!r}: instructions must be a str, got "
                f"{type(self.instructions).__name__}"
            )
        check_sendable(self.instructions, f"Agent {self.name!r}: instructions")
        if (
            not isinstance(self.priority, int)
            or isinstance(self.priority, bool)
            or abs(self.priority) > MAX_PRIORITY
        ):
            # (A huge int raised a bare OverflowError at every turn under Priority, which
            # ranks turns by priority × boost in float nanoseconds.)
            raise ConfigError(
                f"Agent {self.name!r}: priority must be an int from {-MAX_PRIORITY} to "
                f"{MAX_PRIORITY}, got {shown(self.priority)}"
            )
        context: object = self.context  # as given: a list too (the field's type is as kept)
        if isinstance(context, list | tuple):
            from agentflow._context_chain import ContextChain

            try:
                chain = ContextChain(context)
            except ConfigError as exc:
                raise ConfigError(f"Agent {self.name!r}: {exc}") from None
            object.__setattr__(self, "context", chain)
        elif context is not None and not callable(getattr(context, "bind", None)):
            from agentflow._context_chain import ContextChain, is_prefix_source

            if is_prefix_source(context):  # it says what it needs before it
                try:
                    ContextChain([context])
                except ConfigError as exc:
                    raise ConfigError(f"Agent {self.name!r}: {exc}") from None
            raise ConfigError(
                f"Agent {self.name!r}: context {context!r} is not a context link (it has no bind())"
            )
        if not isinstance(self.params, Mapping):
            raise ConfigError(
                f"Agent {self.name!r}: params must be a mapping (a dict of body fields), "
                f"got {type(self.params).__name__}"
            )
        bad = PARAMS_RESERVED.intersection(self.params)
        if bad:
            raise ConfigError(
                f"Agent {self.name!r}: params may not set {sorted(bad)}; the session sets them"
            )
        check_sendable(dict(self.params), f"Agent {self.name!r}: params")
        for key in ("max_tokens", "max_completion_tokens"):
            # The budget reserves it, the scheduler charges it: a server would refuse it.
            if (value := self.params.get(key)) is not None:
                check_count(value, f"Agent {self.name!r}: params[{key!r}]")
        given: object = self.tools  # as given: callables too (the field's type is as kept)
        if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
            raise ConfigError(
                f"Agent {self.name!r}: tools must be a list (or set) of tools or callables, "
                f"got {type(given).__name__}"
            )
        tools = tuple(sorted((as_tool(t) for t in given), key=lambda t: t.name))
        names = [t.name for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"Agent {self.name!r}: duplicate tool names {dupes}")
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "params", dict(self.params))
        specs = self.tool_specs
        # allow_nan=False: strict JSON (a tool's spec holds no Infinity or NaN: Tool refuses it).
        specs_json = json.dumps(specs, sort_keys=True, separators=(",", ":"), allow_nan=False)
        object.__setattr__(self, "tool_specs_json", specs_json)
        object.__setattr__(self, "tool_chars", len(specs_json) if specs else 0)
        object.__setattr__(
            self,
            "prefix_key",
            _prefix_key(self.model, self.instructions, specs_json if specs else None),
        )

    def __hash__(self) -> int:
        # Equal agents have equal names and models (``params`` is a dict, unhashable: the
        # generated hash raised TypeError, though mypy took dict[Agent, ...]).
        return hash((self.name, self.model))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass's own @dataclass (frozen, eq) would generate a hash of every field,
        # ``params`` a dict among them: unhashable again. Given here, before the
        # decorator runs, the hash is the subclass's own, which the decorator keeps.
        super(Agent, cls).__init_subclass__(**kwargs)  # (slots=True remade the class)
        if "__hash__" not in cls.__dict__:
            cls.__hash__ = Agent.__hash__  # type: ignore[method-assign]

    @property
    def max_output_tokens(self) -> int | None:
        """``max_completion_tokens`` (else ``max_tokens``) from ``params``, if set: see
        :func:`output_size`."""
        return output_size(self.params)

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list for requests, in tool-name order."""
        return [t.spec() for t in self.tools]

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the agent has one."""
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def session(
        self,
        task: str | Sequence[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """Start a conversation: ``task`` is the first user message (or a list of messages)."""
        from agentflow._session import Session

        return Session(self, task, session_id=session_id, metadata=metadata)

    async def run(self, task: str, transport: Transport) -> SessionResult:
        """Run one session to its end on ``transport`` (no fleet, no concurrency bound),
        with the default :class:`~agentflow.RetryPolicy`."""
        return await self.session(task).run(transport)


def _prefix_key(model: str, instructions: str, tools_json: str | None) -> str | None:
    """The digest of the compact JSON of ``[model, instructions, tools]``, with the tool
    schemas' JSON the agent made (``tool_specs_json``; ``None``: no tools).

    ``None`` when there is no shared prefix (no instructions, no tools)."""
    if not instructions and tools_json is None:
        return None
    blob = f"[{json.dumps(model)},{json.dumps(instructions)},{tools_json or '[]'}]"
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()
