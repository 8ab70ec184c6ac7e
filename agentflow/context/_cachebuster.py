"""The cache-buster check: prefixes that should match but differ by something volatile.

A server's prefix cache serves a prompt's leading tokens only if they are identical,
token for token, to a prompt it has seen. Every session of an agent starts with the
same *shared prefix* — its system message(s) and tool schemas — and every turn of a
session resends its *pinned prefix* (the shared prefix, plus any pinned first
messages) unchanged. A timestamp, a UUID, a nonce or a counter in a system prompt, a
JSON document whose keys come out in a different order, or tools listed in another
order, makes those prefixes differ in a few characters — and from that character on,
nothing hits: a known way to lose every cache hit without noticing.

:class:`CacheBusterCheck` watches for it. Per turn it compares only the pinned prefix,
first by identity and equality of the message objects (no copy, no encoding, when
nothing changed), then by a BLAKE2b digest; only a digest it has not seen is diffed
(:mod:`agentflow.context._bustdiff` says what differs). A prefix that differs for real
(a different instruction) is not a cache buster and is not reported.

**Every bust is reported, once per distinct cause.** A *bust* is one turn whose prefix
differs volatilely from its reference; its *causes* are the distinct (kind, segment)
pairs found — a timestamp in ``messages[0]``, a UUID in ``messages[1]``. Each bust gives
one :class:`CacheBusterWarning` event per cause, with ``occurrence`` counting that
cause's busts so far (per session for turn-to-turn busts, per agent for busts across
sessions): a timestamp rewritten before every turn is reported on every turn, each
time with that turn's loss. The structlog warning on ``agentflow.context`` is logged
the first time a cause is seen per agent (later ones at debug level).

**The loss is measured.** ``lost_tokens`` is the prompt tokens the bust cost — from the
first differing character to the end of what would otherwise have hit, the history
after the prefix included. Context policies (``ContextBudget``, the check on its own)
defer the report until the turn's response (:meth:`CacheBusterCheck.observe_turn`) and
measure it from the server's figures: what the server held of this session (the
previous prompt and reply, as it reported them, in its 16-token blocks) against the
``cached_tokens`` it served. Without server figures, it is estimated from the text.
(:mod:`agentflow.context._bustreport` holds the warning and both figures.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentflow._context_chain import Binding, Link
from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.context import _bustdiff
from agentflow.context._bustdiff import CacheBusterKind, Finding, Prefix, message_texts
from agentflow.context._bustreport import (
    Bust,
    CacheBusterScope,
    CacheBusterWarning,
    default_count,
    estimated_loss,
    measured_loss,
    warnings_of,
)
from agentflow.context._cachebuster_link import CheckContext

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace

__all__ = ["CacheBusterCheck", "CacheBusterKind", "CacheBusterScope", "CacheBusterWarning"]


_SYSTEM_ROLES = frozenset({"system", "developer"})
# How many prefix digests an agent remembers as already seen (and so not diffed again).
_KNOWN_DIGESTS = 64


@dataclass(slots=True)
class _SessionState:
    pinned: int
    shared: int
    snapshot: tuple[Any, ...]
    tools: tuple[Any, ...]
    prefix: Prefix
    sent: int = 0
    #: Tokens of this session the server holds: its previous prompt and reply.
    held: int | None = None
    pending: Bust | None = None
    occurrences: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class _AgentState:
    reference: Prefix | None = None
    known: OrderedDict[bytes, None] = field(default_factory=OrderedDict)
    occurrences: dict[tuple[str, str], int] = field(default_factory=dict)
    logged: set[tuple[str, str, str]] = field(default_factory=set)


class CacheBusterCheck(Link["CheckContext"]):
    """Warns when prefixes that should match differ only by something volatile.

    Call :meth:`check` once per turn, just before the request is sent, with the messages
    and tools it will carry — a context policy's ``before_turn`` is the place (after any
    rewriting of the history) — and, to have each bust's loss measured by the server,
    :meth:`observe_turn` with the turn's trace after it. A check can also be the agent's
    context link on its own, ``Agent(context=CacheBusterCheck())`` (it then only
    checks; it keeps no budget), or after a budget, ``Agent(context=[ContextBudget(...),
    CacheBusterCheck(...)])``; a ``ContextBudget`` without a check link runs one with
    defaults. Both calls are made for you.

    One check serves any number of agents and sessions: share one instance across the
    sessions whose prefixes are to be compared. Sessions of different agents are not
    compared, unless ``group`` puts their agents together.

    Args:
        group: maps an agent's name to the key of the agents that share one prefix
            (default: the name itself). Sessions are compared when their keys are equal
            — e.g. ``lambda name: "coder"`` for a fleet of agents ``coder-000``,
            ``coder-001``, … built from one template.
        shared_messages: how many leading messages every session of an agent shares (and
            that are compared across sessions); default: its leading system/developer
            messages. Tool schemas are always part of the shared prefix.
        count: estimates a text's tokens, for ``lost_tokens`` without server figures
            (default: characters / 4).
        block_size: the server's prefix-cache block, in tokens (vLLM's default 16): it
            serves whole blocks only.
        max_sessions: sessions remembered for the turn-to-turn comparison (the least
            recently checked are forgotten first).
        max_warnings: warnings kept in :attr:`warnings` (the oldest are dropped first).

    Attributes:
        warnings: the warnings emitted, oldest first (the last ``max_warnings``).
        busts: busts reported so far.
        lost_tokens: their ``lost_tokens``, summed (once per bust).
    """

    def __init__(
        self,
        *,
        group: Callable[[str], str] | None = None,
        shared_messages: int | None = None,
        count: Callable[[str], int] | None = None,
        block_size: int = 16,
        max_sessions: int = 4096,
        max_warnings: int = 10_000,
    ) -> None:
        check_count(
            shared_messages,
            "CacheBusterCheck.shared_messages",
            0,
            none="the leading system/developer messages",
        )
        for name, fn in (("group", group), ("count", count)):
            if fn is not None and not callable(fn):
                raise ConfigError(f"CacheBusterCheck.{name} must be a function or None, got {fn!r}")
        check_count(block_size, "CacheBusterCheck.block_size")
        check_count(max_sessions, "CacheBusterCheck.max_sessions")
        check_count(max_warnings, "CacheBusterCheck.max_warnings")
        self._group = group
        self._shared = shared_messages
        self._count = count or default_count
        self._block = block_size
        self._max_sessions = max_sessions
        self._max_warnings = max_warnings
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        self._agents: dict[str, _AgentState] = {}
        self.warnings: list[CacheBusterWarning] = []
        self.busts = 0
        self.lost_tokens = 0

    def check(
        self,
        session_id: str,
        agent: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        emit: Callable[[CacheBusterWarning], None] | None = None,
        *,
        turn: int | None = None,
        pinned: int | None = None,
        defer: bool = False,
    ) -> list[CacheBusterWarning]:
        """Check the prompt ``session_id`` is about to send; returns the warnings emitted.

        Cheap when nothing changed: the pinned messages are compared by identity and
        equality with the previous turn's, the tool list by identity. A new session's
        shared prefix is hashed and compared with the agent's known digests; only an
        unknown digest is diffed.

        Args:
            session_id: the session.
            agent: its agent's name (prefixes are compared within one agent, or one
                ``group``, only).
            messages: the messages about to be sent.
            tools: the tool schemas about to be sent.
            emit: receives each warning as an event (a fleet's ``emit``); it is also
                logged on ``agentflow.context`` either way.
            turn: the turn about to be sent, for the warning.
            pinned: how many leading messages this session pins (compared turn to
                turn); default: the shared messages. Fixed at the session's first check.
            defer: hold a bust's warnings until :meth:`observe_turn` measures its loss
                (then this returns nothing); a bust never observed is reported, with
                its estimate, at the session's next check or :meth:`forget`.
        """
        state = self._sessions.get(session_id)
        bust: Bust | None = None
        if state is not None:
            self._sessions.move_to_end(session_id)
            if state.pending is not None:
                self._report(state, None)
            n = min(state.pinned, len(messages))
            snapshot = _bustdiff.snapshot(messages, n)
            sent, state.sent = state.sent, len(messages)
            if snapshot == state.snapshot and _same_objects(tools, state.tools):
                return []
            prefix = _bustdiff.build_prefix(session_id, messages, n, state.shared, tools)
            previous = state.prefix
            state.snapshot, state.tools, state.prefix = snapshot, tuple(tools), prefix
            if prefix.digest == previous.digest:
                return []
            # The previous turn's history after the prefix, and its reply, hit no more.
            end = sent + 1 if sent < len(messages) else sent
            history = tuple(messages[n:end])
            bust = self._compare(agent, "turns", turn, previous, prefix, history, (), emit)
        else:
            n_shared = self._n_shared(messages)
            n = min(len(messages), max(n_shared, pinned if pinned is not None else 0))
            prefix = _bustdiff.build_prefix(session_id, messages, n, n_shared, tools)
            state = self._sessions[session_id] = _SessionState(
                n, n_shared, _bustdiff.snapshot(messages, n), tuple(tools), prefix, len(messages)
            )
            if len(self._sessions) > self._max_sessions:
                _, oldest = self._sessions.popitem(last=False)
                if oldest.pending is not None:
                    self._report(oldest, None)
            ag = self._agents.setdefault(self._key(agent), _AgentState())
            if prefix.shared_digest in ag.known:
                ag.known.move_to_end(prefix.shared_digest)
                return []
            shared = prefix.shared_part()
            if ag.reference is not None:
                texts = (*prefix.texts, *(t for m in messages[n:] for t in message_texts(m)))
                bust = self._compare(agent, "sessions", turn, ag.reference, shared, (), texts, emit)
            ag.reference = shared
            ag.known[prefix.shared_digest] = None
            if len(ag.known) > _KNOWN_DIGESTS:
                ag.known.popitem(last=False)
        if bust is None:
            return []
        state.pending = bust
        return [] if defer else self._report(state, None)

    def observe_turn(self, session_id: str, trace: TurnTrace) -> list[CacheBusterWarning]:
        """Learn what the server holds of the session from the turn's usage, and report
        the turn's deferred bust, if any, with its loss measured; returns its warnings.

        Call it after each turn whose :meth:`check` was deferred (context policies do,
        in ``after_turn``).
        """
        state = self._sessions.get(session_id)
        if state is None:
            return []
        usage = trace.usage
        out = self._report(state, trace) if state.pending is not None else []
        # What the server holds now: the prompt and the reply it generated (but the
        # last token, never computed) — or only the prompt, if the reply began with
        # reasoning, which the next prompt leaves out.
        state.held = None
        if usage is not None and usage.prompt_tokens:
            reply = usage.completion_tokens or 0
            state.held = usage.prompt_tokens + (max(0, reply - 1) if not trace.reasoning else 0)
        return out

    def forget(self, session_id: str) -> None:
        """Drop what is remembered of a session (e.g. when it ended); a bust not yet
        reported is reported first, with its estimate."""
        state = self._sessions.pop(session_id, None)
        if state is not None and state.pending is not None:
            self._report(state, None)

    def session_for(self, at: Binding) -> CheckContext:
        """A per-session context that runs this check (a link of the agent's context);
        after a :class:`~agentflow.context.ContextBudget` in a chain it compares the
        budget's pinned prefix turn to turn."""
        return CheckContext(at, self)

    def _key(self, agent: str) -> str:
        return agent if self._group is None else self._group(agent)

    def _n_shared(self, messages: Sequence[Mapping[str, Any]]) -> int:
        if self._shared is not None:
            return min(self._shared, len(messages))
        n = 0
        while n < len(messages) and messages[n].get("role") in _SYSTEM_ROLES:
            n += 1
        return n

    def _compare(
        self,
        agent: str,
        scope: CacheBusterScope,
        turn: int | None,
        ref: Prefix,
        cur: Prefix,
        history: tuple[Mapping[str, Any], ...],
        prompt_texts: tuple[str, ...],
        emit: Callable[[CacheBusterWarning], None] | None,
    ) -> Bust | None:
        found = _bustdiff.diff(ref, cur)
        if found is None:
            return None
        findings, first = found
        causes: dict[tuple[str, str], tuple[int, Finding]] = {}
        for i, f in findings:
            causes.setdefault((f.kind, cur.labels[i]), (i, f))
        return Bust(
            agent, scope, turn, ref, cur, list(causes.values()), first, history, prompt_texts, emit
        )

    def _report(self, state: _SessionState, trace: TurnTrace | None) -> list[CacheBusterWarning]:
        """Emit the session's pending bust: one warning per cause."""
        bust = state.pending
        state.pending = None
        if bust is None:
            return []
        usage = trace.usage if trace is not None else None
        measured = measured_loss(
            bust, usage, held=state.held, count=self._count, block_size=self._block
        )
        lost = measured if measured is not None else estimated_loss(bust, self._count)
        self.busts += 1
        self.lost_tokens += lost
        ag = self._agents.setdefault(self._key(bust.agent), _AgentState())
        counts = state.occurrences if bust.scope == "turns" else ag.occurrences
        source: Literal["server", "estimate"] = "server" if measured is not None else "estimate"
        out: list[CacheBusterWarning] = []
        for warning in warnings_of(bust, lost, source, counts, ag.logged):
            out.append(warning)
            self.warnings.append(warning)
            if bust.emit is not None:
                bust.emit(warning)
        if len(self.warnings) > self._max_warnings:
            del self.warnings[: len(self.warnings) - self._max_warnings]
        return out

    def __repr__(self) -> str:
        return (
            f"CacheBusterCheck(agents={len(self._agents)}, sessions={len(self._sessions)}, "
            f"busts={self.busts}, lost_tokens={self.lost_tokens})"
        )


def _same_objects(a: Sequence[Any], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
