"""The events the context seam emits: a prompt trimmed, a history compacted, a fleet budget
crossed, a cache buster found.

They live here, below both :mod:`agentflow.context` and the events module, so that the
events module (the :data:`agentflow.Event` union) imports nothing above it; they are
public as ``agentflow.context.BudgetEvent`` and so on. Like every event they are frozen
dataclasses told apart by ``type``, and reach the fleet's callbacks through the ``emit`` a
session hands to :meth:`~agentflow.context.ContextBudget.bind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from agentflow._trace import TurnTrace

__all__ = [
    "BudgetEvent",
    "CacheBusterKind",
    "CacheBusterScope",
    "CacheBusterWarning",
    "CompactionEvent",
    "ContextTrimmedEvent",
]

#: What made two prefixes differ: a ``timestamp`` (a date, a time of day, an ISO-8601 or
#: HTTP date-time, a Unix epoch), a ``uuid``, a ``nonce`` (16+ hex digits, or a random
#: base64 token, URL-safe too), a ``counter`` (any other number, in exponent notation
#: too), ``reordered_keys`` (the same JSON object with its keys in another order) or
#: ``reordered_tools`` (the same tool schemas in another order).
CacheBusterKind: TypeAlias = Literal[
    "timestamp", "uuid", "nonce", "counter", "reordered_keys", "reordered_tools"
]

#: What was compared: two ``sessions`` of one agent (their shared prefix), or two
#: ``turns`` of one session (its pinned prefix).
CacheBusterScope: TypeAlias = Literal["sessions", "turns"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextTrimmedEvent:
    """An overflow policy rewrote a session's messages to bring its prompt inside the window.

    One event per policy that changed something; a chain (truncate, then compact) emits
    one for each step it took. Token figures are calibrated estimates.

    Attributes:
        agent: the agent's name.
        session_id: the session.
        turn: the turn about to be sent.
        policy: the policy's name (``drop_oldest``, ``truncate_tool_outputs``, ``compact``, …).
        tokens_before: the prompt estimate before the policy ran.
        tokens_after: the prompt estimate after it.
        limit: the most prompt tokens allowed (window − output reserve − margin).
        messages_before: how many messages the session had before.
        messages_after: how many it has after.
    """

    agent: str
    session_id: str
    turn: int
    policy: str
    tokens_before: int
    tokens_after: int
    limit: int
    messages_before: int
    messages_after: int
    type: Literal["context_trimmed"] = "context_trimmed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEvent:
    """Older turns of a session were summarised by a model call.

    Attributes:
        agent: the agent's name.
        session_id: the session.
        turn: the turn about to be sent.
        messages_summarised: how many messages the summary replaced.
        tokens_before: the prompt estimate before compaction.
        tokens_after: the prompt estimate after it (summary included).
        summary_tokens: the summary message's estimate.
        model: the model that wrote the summary.
        trace: the summary request's trace (its usage is what the compaction cost).
    """

    agent: str
    session_id: str
    turn: int
    messages_summarised: int
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    model: str
    trace: TurnTrace
    type: Literal["compaction"] = "compaction"


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetEvent:
    """A fleet-wide budget crossed one of its warning fractions, or ran out.

    Counted from a turn's usage: it comes after that turn's last token, before its
    ``turn_end`` — or, crossed by a context policy's own request (a compaction's
    summary), before the turn is sent, ahead of its ``compaction`` event.

    Attributes:
        agent: the agent whose turn crossed it.
        session_id: that turn's session.
        turn: that turn.
        budget: ``"tokens"`` or ``"cost"``.
        spent: how much is used so far (tokens, or the cost in the prices' currency).
        limit: the budget.
        fraction: the threshold crossed (``1.0`` when the budget is spent).
        exceeded: whether the budget is spent: no further turn will start.
    """

    agent: str
    session_id: str
    turn: int
    budget: Literal["tokens", "cost"]
    spent: float
    limit: float
    fraction: float
    exceeded: bool
    type: Literal["budget"] = "budget"


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheBusterWarning:
    """A prefix that should match an earlier one differs only by something volatile.

    Attributes:
        agent: the agent's name.
        session_id: the session whose prompt was checked.
        turn: the turn whose prompt was checked, when the caller said. A session's
            check reports it once the turn's usage measured the loss: after the turn's
            last token, before its ``turn_end`` (at the session's end, with the
            estimate, when the turn failed).
        kind: what differs (see :data:`CacheBusterKind`).
        scope: ``sessions`` — this session's shared prefix against an earlier session of
            the same agent; ``turns`` — its pinned prefix against its own previous turn.
        reference_session_id: the session compared against (``session_id`` for ``turns``).
        segment: the part of the prefix that differs: ``messages[i]`` (its content),
            ``messages[i].fields`` (its other keys) or ``tools`` (the tools' JSON).
        start: where the differing span begins in this prompt's segment text
            (a character offset: into the message's content string, or into the tools'
            JSON as msgspec encodes it).
        end: where it ends (exclusive).
        snippet: this prompt's text in the span.
        reference_start: where the span begins in the reference's segment text.
        reference_end: where it ends there.
        reference_snippet: the reference's text in its span.
        lost_tokens: the prompt tokens this bust cost: from its first differing
            character to the end of what would otherwise have hit. One bust with several
            causes gives each of its warnings the same figure (:attr:`CacheBusterCheck.
            lost_tokens` counts it once).
        lost_source: ``server`` — measured from the server's usage (what it held of the
            session, or of the shared prefix, against the ``cached_tokens`` it served);
            ``estimate`` — counted from the text (no usage was reported back).
        occurrence: how many busts of this cause (kind and segment) there have been,
            this one included: in this session for ``turns``, in this agent (or group)
            for ``sessions``.
    """

    agent: str
    session_id: str
    turn: int | None
    kind: CacheBusterKind
    scope: CacheBusterScope
    reference_session_id: str
    segment: str
    start: int
    end: int
    snippet: str
    reference_start: int
    reference_end: int
    reference_snippet: str
    lost_tokens: int
    lost_source: Literal["server", "estimate"] = "estimate"
    occurrence: int = 1
    type: Literal["cache_buster"] = "cache_buster"
