"""How fleet objects become stored rows and back: agent fingerprints, a session's task,
JSON for messages and traces, and moving a trace from one process's clock to another's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._tools import Tool
from agentflow._trace import PromptInfo, TurnTrace
from agentflow.store._records import AgentInfo

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow._session import Session

__all__ = [
    "agent_info",
    "check_one_config_per_name",
    "decode_json",
    "decode_prompt",
    "decode_trace",
    "encode",
    "fingerprint",
    "session_task",
    "shift_trace",
    "text_hash",
]

_encoder = msgspec.json.Encoder(enc_hook=repr)
_trace_decoder = msgspec.json.Decoder(TurnTrace)
_prompt_decoder = msgspec.json.Decoder(PromptInfo | None)
_any_decoder = msgspec.json.Decoder()


def encode(value: Any) -> str:
    """Compact JSON text (dataclasses as objects; anything JSON cannot carry as its repr)."""
    return _encoder.encode(value).decode()


def decode_json(text: str | bytes | None) -> Any:
    """The value of a JSON column (``None`` stays ``None``)."""
    return None if text is None else _any_decoder.decode(text)


def decode_trace(text: str | bytes) -> TurnTrace:
    """A :class:`TurnTrace` from its JSON."""
    return _trace_decoder.decode(text)


def decode_prompt(text: str | bytes | None) -> PromptInfo | None:
    """A :class:`PromptInfo` (or ``None``) from its JSON."""
    return None if text is None else _prompt_decoder.decode(text)


@functools.lru_cache(maxsize=256)
def text_hash(text: str) -> str:
    """The key a long text (a system prompt) is stored under once. Remembered for the
    last 256 texts: a fleet's sessions mostly share a few system prompts, tens of KB
    each, which would otherwise be hashed once per session."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _context_name(context: object) -> str | None:
    """The context's type; a chain's names its links in order (dropping or adding a link
    changes the fingerprint)."""
    if context is None:
        return None
    links = getattr(context, "given", None)
    if isinstance(links, tuple):
        names = ",".join(type(link).__qualname__ for link in links)
        return f"{type(context).__qualname__}({names})"
    return type(context).__qualname__


def _settings(agent: Agent, context: str | None = None) -> dict[str, Any]:
    """An agent's configuration but its tool schemas and its tools' own limits
    (:func:`_config`)."""
    timeout = agent.tool_timeout_s
    return {
        "model": agent.model,
        "params": dict(agent.params),
        "max_turns": agent.max_turns,
        "tool_errors": agent.tool_errors,
        "tool_timeout_s": None if math.isinf(timeout) else timeout,
        "max_tool_output_chars": agent.max_tool_output_chars,
        "priority": agent.priority,
        "context": context if context is not None else _context_name(agent.context),
    }


def _tool_limits(agent: Agent) -> dict[str, dict[str, float | int | None]]:
    """Per tool (by name), the limits its calls run under: its own ``timeout_s`` and
    ``max_output_chars``, else the agent's (``None``: no limit)."""
    limits: dict[str, dict[str, float | int | None]] = {}
    for t in agent.tools:
        if isinstance(t, Tool):
            timeout = t.timeout_s if t.timeout_s is not None else agent.tool_timeout_s
            chars = t.max_output_chars
            limits[t.name] = {
                "timeout_s": None if math.isinf(timeout) else timeout,
                "max_output_chars": chars if chars is not None else agent.max_tool_output_chars,
            }
    return limits


def _config(agent: Agent, context: str | None = None, *, limits: bool = True) -> dict[str, Any]:
    """What the store keeps of ``agent``'s configuration (and fingerprints): its
    settings, its tools' limits (``limits``: the definitions before :func:`fingerprint`'s
    3 had none) and its tool schemas."""
    settings = _settings(agent, context)
    if limits:
        settings["tool_limits"] = _tool_limits(agent)
    return {**settings, "tools": agent.tool_specs}


def _config_json(agent: Agent, context: str | None = None, *, limits: bool = True) -> str:
    """``_dumps(_config(agent, context, limits=limits))``, with the tool schemas' JSON the
    agent made once (``Agent.tool_specs_json``): ``"tools"`` sorts after every other key."""
    settings = _settings(agent, context)
    if limits:
        settings["tool_limits"] = _tool_limits(agent)
    return f'{_dumps(settings)[:-1]},"tools":{agent.tool_specs_json}}}'


def fingerprint(agent: Agent, *, context: str | None = None) -> str:
    """A digest of everything about ``agent`` that shapes its conversations: name, model,
    instructions, tool schemas, params, limits (its own and each tool's ``timeout_s`` and
    ``max_output_chars``), tool-error handling, priority and the context's type (a
    chain's: its links' types, in order); ``context`` stands in for that type's name.
    Tool *code* cannot be fingerprinted; its schema is.

    It is the BLAKE2b-128 of the compact, key-sorted JSON of ``[5, name,
    text_hash(instructions), config]``: the instructions count by their digest, the one
    they are stored under, which :func:`text_hash` remembers — a fleet's agents share a
    prompt of tens of KB, hashed once rather than once per agent. The 5 tells this
    definition from those runs were recorded with before (:func:`fingerprints`): 4 is
    the same over tool schemas described without what a ``pydantic.Field(...)`` default
    adds, 3 without what ``Annotated[...]`` hints add either."""
    return _digest(5, agent, _config_json(agent, context))


def _fingerprint_v4(agent: Agent, context: str | None = None) -> str:
    """The fingerprint runs recorded before ``Field(...)`` defaults reached tool schemas
    hold: :func:`fingerprint`'s definition with a 4 (of ``agent`` as described then:
    :func:`_before_field_defaults`). A number of its own, so that a run recorded since
    with a schema that lacks a default does not resume with one added."""
    return _digest(4, agent, _config_json(agent, context))


def _fingerprint_v3(agent: Agent, context: str | None = None) -> str:
    """The fingerprint runs recorded before ``Annotated[...]`` hints reached tool schemas
    hold: :func:`fingerprint`'s definition with a 3 (of ``agent`` as described then:
    :func:`_before_annotated`)."""
    return _digest(3, agent, _config_json(agent, context))


def _fingerprint_v2(agent: Agent, context: str | None = None) -> str:
    """The fingerprint runs recorded before the tools' own limits counted hold:
    :func:`fingerprint`'s definition with a 2 and without ``tool_limits``."""
    return _digest(2, agent, _config_json(agent, context, limits=False))


def _digest(version: int, agent: Agent, config_json: str) -> str:
    name, ref = _dumps(agent.name), _dumps(text_hash(agent.instructions))
    blob = f"[{version},{name},{ref},{config_json}]"
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _fingerprint_v1(agent: Agent, context: str | None = None) -> str:
    """The fingerprint runs recorded by earlier versions hold: the BLAKE2b-128 of the compact,
    key-sorted JSON of ``[name, instructions, config]`` — the whole prompt hashed once per
    agent, without the tools' own limits."""
    blob = _dumps([agent.name, agent.instructions, _config(agent, context, limits=False)])
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def fingerprints(agent: Agent) -> set[str]:
    """The fingerprints a recorded run may hold for ``agent``: its own, and the ones of
    definitions runs were recorded with before — over tool schemas without what a
    ``Field(...)`` default adds (:func:`_fingerprint_v4`), without what
    ``Annotated[...]`` hints add (:func:`_fingerprint_v3`), without the tools' own limits
    (:func:`_fingerprint_v2`), the whole prompt hashed (:func:`_fingerprint_v1`) and,
    when its context is a chain holding a ``ContextBudget``, the context named
    ``ContextBudget`` (before the context chain existed,
    ``ContextBudget(fleet=, prefix_index=, cache_buster=)`` was the way to write such a
    chain, and its type alone was fingerprinted). A run recorded with an earlier
    definition therefore resumes with a tool's own limits changed unnoticed, as it
    would have before."""
    contexts: list[str | None] = [None]
    links = getattr(agent.context, "given", None)
    if isinstance(links, tuple) and any(
        type(link).__qualname__ == "ContextBudget" for link in links
    ):
        contexts.append("ContextBudget")
    found = set()
    # The earlier definitions were taken over tool schemas described without what
    # Annotated[...] hints add: of the agent as it was described then.
    before = _before_annotated(agent) or agent
    # Runs recorded before a Field(...) default reached the schema (stop 40) hold the
    # definition 4 over the schemas without it.
    before_fields = _before_field_defaults(agent) or agent
    for context in contexts:
        found.add(fingerprint(agent, context=context))
        found.add(_fingerprint_v4(before_fields, context))
        found.add(_fingerprint_v3(before, context))
        found.add(_fingerprint_v2(before, context))
        found.add(_fingerprint_v1(before, context))
    return found


def _before_annotated(agent: Agent) -> Agent | None:
    """``agent`` with its tools made from functions described as releases before stop 36
    described them — without what ``Annotated[...]`` hints add to the schema — or
    ``None`` when that changes no tool: runs recorded then hold fingerprints of those
    schemas, and resume. (Resume only: each such tool is described again.)"""
    return _described_as(agent, annotated=False)


def _before_field_defaults(agent: Agent) -> Agent | None:
    """``agent`` with its tools described as releases before stop 40 described them — a
    ``pydantic.Field(...)`` default a plain one, left out of the schema — or ``None`` when
    that changes no tool: runs recorded then hold the definition 4's fingerprint over
    those schemas."""
    return _described_as(agent, field_defaults=False)


def _described_as(agent: Agent, **how: bool) -> Agent | None:
    """``agent`` with its tools described again by ``describe(..., **how)``, or ``None``
    when no tool's schema changes."""
    from pydantic.json_schema import PydanticJsonSchemaWarning

    from agentflow._errors import ConfigError
    from agentflow._tool_schema import describe

    tools: list[Any] = []
    changed = False
    for t in agent.tools:
        if isinstance(t, Tool) and t._args_model is not None:
            try:
                # A Field(...) kept as a plain default is no JSON value: pydantic warns
                # it leaves it out of the schema (as it did then), an error under -W error.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PydanticJsonSchemaWarning)
                    old = describe(t.fn, name=t.name, description=t.description, **how)
            except ConfigError:  # a hint only its Annotated form describes
                old = None
            if old is not None and old.parameters != t.parameters:
                t = dataclasses.replace(t, parameters=old.parameters)
                changed = True
        tools.append(t)
    return dataclasses.replace(agent, tools=tuple(tools)) if changed else None


def agent_info(agent: Agent) -> AgentInfo:
    """The :class:`AgentInfo` of ``agent`` (fingerprint and a JSON-able summary)."""
    return AgentInfo(
        name=agent.name,
        fingerprint=fingerprint(agent),
        instructions=agent.instructions,
        config=_config(agent),
    )


def check_one_config_per_name(agents: Iterable[Agent]) -> None:
    """Refuse two configurations (fingerprints) under one agent name in one recorded run.

    A store keeps one configuration per name in a run (the first; the second is a
    conflict): a session of the other would read back — and resume — with the first's
    system prompt. Only names shared by several agent objects are fingerprinted.

    Raises:
        ConfigError: two agents of one name differ (the message names it).
    """
    from agentflow._errors import ConfigError

    by_name: dict[str, dict[int, Agent]] = {}
    for a in agents:
        by_name.setdefault(a.name, {})[id(a)] = a
    for name, same in by_name.items():
        if len(same) > 1 and len({fingerprint(a) for a in same.values()}) > 1:
            raise ConfigError(
                f"agents named {name!r} have different configurations (instructions, "
                "model, tools, params or limits differ): a run store keeps one "
                "configuration per agent name in a run; give each configuration its own name"
            )


def session_task(session: Session) -> list[dict[str, Any]]:
    """A session's initial messages without the system prompt its agent adds, so that
    ``agent.session(task)`` rebuilds them exactly (no duplicated system message)."""
    messages = session.messages
    instructions = session.agent.instructions
    if instructions and messages and messages[0] == {"role": "system", "content": instructions}:
        return [dict(m) for m in messages[1:]]
    return [dict(m) for m in messages]


def shift_trace(trace: TurnTrace, delta_ns: int) -> TurnTrace:
    """``trace`` with every time moved by ``delta_ns`` (onto another attempt's clock)."""
    if not delta_ns:
        return trace
    return dataclasses.replace(
        trace,
        sent_ns=trace.sent_ns + delta_ns,
        headers_ns=trace.headers_ns + delta_ns,
        end_ns=trace.end_ns + delta_ns,
        chunk_ns=tuple(t + delta_ns for t in trace.chunk_ns),
    )
