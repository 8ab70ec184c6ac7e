"""The cache-buster check: prefixes that should match but differ by something volatile.

A server's prefix cache serves a prompt's leading tokens only if they are identical,
token for token, to a prompt it has seen. Every session of an agent starts with the
same *shared prefix* — its system message(s) and tool schemas — and every turn of a
session resends its *pinned prefix* (the shared prefix, plus any pinned first
messages) unchanged. A timestamp, a UUID, a nonce or a counter in a system prompt, or
a JSON document whose keys come out in a different order, makes those prefixes differ
in a few characters — and from that character on, nothing hits: a known way to lose
every cache hit without noticing.

:class:`CacheBusterCheck` watches for it. Per turn it compares only the pinned prefix,
first by identity and equality of the message objects (no copy, no encoding, when
nothing changed), then by a BLAKE2b digest; only a digest it has not seen is diffed.
The diff masks volatile spans (timestamps and dates, UUIDs, long hex or base64 nonces,
numbers) in both texts and, when the masked texts are equal, names the first span of
each kind that differs; else it looks for one JSON object whose keys were reordered.
A prefix that differs for real (a different instruction) is not a cache buster and is
not reported. Each kind is reported once per agent (or agent group): a structlog warning on
``agentflow.context`` and a :class:`CacheBusterWarning` event.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

import msgspec

from agentflow._errors import ConfigError
from agentflow._logging import get_logger

if TYPE_CHECKING:
    from agentflow._events import Event
    from agentflow._trace import PromptInfo, TurnTrace
    from agentflow.typing import Complete, SessionContext

__all__ = ["CacheBusterCheck", "CacheBusterKind", "CacheBusterScope", "CacheBusterWarning"]

_log = get_logger("agentflow.context")

#: What made two prefixes differ: a ``timestamp`` (a date, a time of day, an ISO-8601 or
#: HTTP date-time, a Unix epoch), a ``uuid``, a ``nonce`` (16+ hex digits, or a random
#: base64 token), a ``counter`` (any other number), or ``reordered_keys`` (the same JSON
#: object with its keys in another order).
CacheBusterKind: TypeAlias = Literal["timestamp", "uuid", "nonce", "counter", "reordered_keys"]

#: What was compared: two ``sessions`` of one agent (their shared prefix), or two
#: ``turns`` of one session (its pinned prefix).
CacheBusterScope: TypeAlias = Literal["sessions", "turns"]

_SYSTEM_ROLES = frozenset({"system", "developer"})
# How far outside the differing region volatile spans are looked for (a span that
# starts before the first differing character: the "2024-05-01T12:00:0" of a timestamp).
_MARGIN = 160
# How many candidate '{' a reordered-keys search tries, innermost first.
_JSON_TRIES = 32
# How many prefix digests an agent remembers as already seen (and so not diffed again).
_KNOWN_DIGESTS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheBusterWarning:
    """A prefix that should match an earlier one differs only by something volatile.

    Attributes:
        agent: the agent's name.
        session_id: the session whose prompt was checked.
        turn: the turn about to be sent, when the caller said.
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
        lost_tokens: the estimated tokens of the prefix, from its first differing
            character to its end, that the prefix cache can no longer serve (everything
            after the prefix misses too).
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
    type: Literal["cache_buster"] = "cache_buster"


_DAY = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_MONTH = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_VOLATILE = re.compile(
    rf"""(?<![0-9A-Za-z])(?:
      (?P<uuid>[0-9a-fA-F]{{8}}-[0-9a-fA-F]{{4}}-[0-9a-fA-F]{{4}}-[0-9a-fA-F]{{4}}-[0-9a-fA-F]{{12}})
    | (?P<timestamp>
          \d{{4}}-\d{{2}}-\d{{2}}
          (?:[T\ ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{{2}}:?\d{{2}})?
        | \d{{1,2}}/\d{{1,2}}/\d{{2,4}}
        | \d{{1,2}}:\d{{2}}(?::\d{{2}}(?:[.,]\d+)?)?(?:\ ?[AP]M)?(?:Z|[+-]\d{{2}}:?\d{{2}})?
        | 1\d{{9}}(?:\d{{3}})?(?:\.\d+)?
        | {_DAY} | {_MONTH}
      )
    | (?P<nonce>
          [0-9a-fA-F]{{16,}}
        | (?=[A-Za-z0-9+/_]*\d)(?=[A-Za-z0-9+/_]*[a-z])(?=[A-Za-z0-9+/_]*[A-Z])
          [A-Za-z0-9+/_]{{20,}}={{0,2}}
      )
    | (?P<counter>\d+(?:\.\d+)?)
    )(?![0-9A-Za-z])""",
    re.VERBOSE,
)
_KINDS: tuple[CacheBusterKind, ...] = ("uuid", "timestamp", "nonce", "counter")


def _default_count(text: str) -> int:
    """About four characters per token."""
    return math.ceil(len(text) / 4)


def _json_text(value: Any, *, sort: bool = False) -> str:
    order: Literal["sorted"] | None = "sorted" if sort else None
    return msgspec.json.encode(value, enc_hook=str, order=order).decode()


@dataclass(frozen=True, slots=True)
class _Prefix:
    """A pinned prefix as text segments, in the order a chat template renders them."""

    labels: tuple[str, ...]
    texts: tuple[str, ...]
    #: How many leading segments every session of the agent shares.
    shared: int
    shared_digest: bytes
    digest: bytes
    session_id: str

    def shared_part(self) -> _Prefix:
        if self.shared == len(self.texts):
            return self
        return _Prefix(
            self.labels[: self.shared],
            self.texts[: self.shared],
            self.shared,
            self.shared_digest,
            self.shared_digest,
            self.session_id,
        )


def _build_prefix(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    n_pinned: int,
    n_shared: int,
    tools: Sequence[Mapping[str, Any]],
) -> _Prefix:
    """The pinned prefix as segments, in the order chat templates render them.

    First the shared part — the shared system messages, the tools, the other shared
    messages — then the rest of the pinned messages. Each message gives two segments:
    its content, and its other keys as JSON.
    """
    pinned = messages[:n_pinned]
    n_shared = min(n_shared, len(pinned))
    n_system = 0
    while n_system < n_shared and pinned[n_system].get("role") in _SYSTEM_ROLES:
        n_system += 1
    labels: list[str] = []
    texts: list[str] = []
    for i in range(n_system):
        _add_message(labels, texts, i, pinned[i])
    labels.append("tools")
    texts.append(_json_text(list(tools)))
    for i in range(n_system, n_shared):
        _add_message(labels, texts, i, pinned[i])
    shared = len(texts)
    for i in range(n_shared, len(pinned)):
        _add_message(labels, texts, i, pinned[i])
    h = hashlib.blake2b(digest_size=16)
    shared_digest = b""
    for k, (label, text) in enumerate(zip(labels, texts, strict=True)):
        if k == shared:
            shared_digest = h.copy().digest()
        h.update(label.encode())
        h.update(b"\0")
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    digest = h.digest()
    return _Prefix(tuple(labels), tuple(texts), shared, shared_digest or digest, digest, session_id)


def _add_message(labels: list[str], texts: list[str], i: int, message: Mapping[str, Any]) -> None:
    # Templates read a message's keys by name, so their order does not reach the prompt:
    # anything but a string content is compared with its keys sorted.
    content = message.get("content")
    labels.append(f"messages[{i}]")
    texts.append(content if isinstance(content, str) else _json_text(content, sort=True))
    labels.append(f"messages[{i}].fields")
    texts.append(_json_text({k: v for k, v in message.items() if k != "content"}, sort=True))


def _snapshot(messages: Sequence[Mapping[str, Any]], n: int) -> tuple[Any, ...]:
    """What the pinned messages hold, cheap to take and to compare.

    String values are kept as they are (comparison is by identity first, then memcmp);
    anything else as its JSON text, so an in-place change — or reordered keys, which
    ``==`` on dicts ignores — is seen.
    """
    return tuple(
        tuple((k, v if type(v) is str else _json_text(v)) for k, v in m.items())
        for m in messages[:n]
    )


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the common suffix, at most ``limit``."""
    la, lb = len(a), len(b)
    if a[la - limit :] == b[lb - limit :]:
        return limit
    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class _Finding:
    kind: CacheBusterKind
    start: int
    end: int
    ref_start: int
    ref_end: int


_Token: TypeAlias = tuple[CacheBusterKind | None, str, int, int]


def _tokens(text: str, offset: int) -> Iterator[_Token]:
    """``text`` as literal pieces and volatile spans: (kind or None, text, start, end)."""
    pos = 0
    for m in _VOLATILE.finditer(text):
        if m.start() > pos:
            yield None, text[pos : m.start()], offset + pos, offset + m.start()
        kind = next(k for k in _KINDS if m.group(k) is not None)
        yield kind, m.group(), offset + m.start(), offset + m.end()
        pos = m.end()
    if pos < len(text):
        yield None, text[pos:], offset + pos, offset + len(text)


def _volatile_only(ref: str, cur: str, p: int, s: int) -> list[_Finding] | None:
    """The differing volatile spans, if masking them makes the two texts equal.

    Only a window around the differing region is tokenised (the texts are equal
    outside it), and the two token streams stop at the first real difference.
    """
    start = max(0, p - _MARGIN)
    tail = max(0, s - _MARGIN)
    pairs = zip_longest(
        _tokens(ref[start : len(ref) - tail], start), _tokens(cur[start : len(cur) - tail], start)
    )
    found: list[_Finding] = []
    for t_ref, t_cur in pairs:
        if t_ref is None or t_cur is None:
            return None
        k_ref, x_ref, s_ref, e_ref = t_ref
        k_cur, x_cur, s_cur, e_cur = t_cur
        if k_ref != k_cur or (k_cur is None and x_ref != x_cur):
            return None
        if k_cur is not None and x_ref != x_cur:
            found.append(_Finding(k_cur, s_cur, e_cur, s_ref, e_ref))
    return found or None


def _reordered(ref: str, cur: str, p: int, s: int) -> _Finding | None:
    """One JSON object around the difference, equal but for the order of its keys."""
    decoder = json.JSONDecoder()
    at = p + 1
    for _ in range(_JSON_TRIES):
        at = ref.rfind("{", 0, at)
        if at < 0:
            return None
        try:
            v_ref, end_ref = decoder.raw_decode(ref, at)
            v_cur, end_cur = decoder.raw_decode(cur, at)
        except ValueError:
            continue
        if (
            end_ref >= len(ref) - s
            and end_cur >= len(cur) - s
            and v_ref == v_cur
            and ref[end_ref:] == cur[end_cur:]
        ):
            return _Finding("reordered_keys", at, end_cur, at, end_ref)
    return None


def _diff(ref: _Prefix, cur: _Prefix) -> tuple[list[tuple[int, _Finding]], int] | None:
    """Findings per differing segment, and the first differing character (in ``cur``'s
    concatenated segments); ``None`` when the prefixes differ for real."""
    if ref.labels != cur.labels:
        return None
    findings: list[tuple[int, _Finding]] = []
    first: int | None = None
    offset = 0
    for i, (a, b) in enumerate(zip(ref.texts, cur.texts, strict=True)):
        if a is b or a == b:
            offset += len(b)
            continue
        p = _common_prefix(a, b)
        s = _common_suffix(a, b, min(len(a), len(b)) - p)
        if first is None:
            first = offset + p
        offset += len(b)
        volatile = _volatile_only(a, b, p, s)
        if volatile is not None:
            findings.extend((i, f) for f in volatile)
            continue
        reordered = _reordered(a, b, p, s)
        if reordered is None:
            return None
        findings.append((i, reordered))
    if first is None or not findings:
        return None
    return findings, first


@dataclass(slots=True)
class _SessionState:
    pinned: int
    shared: int
    snapshot: tuple[Any, ...]
    tools: tuple[Any, ...]
    prefix: _Prefix


@dataclass(slots=True)
class _AgentState:
    reference: _Prefix | None = None
    known: OrderedDict[bytes, None] = field(default_factory=OrderedDict)
    warned: set[str] = field(default_factory=set)


class CacheBusterCheck:
    """Warns when prefixes that should match differ only by something volatile.

    Call :meth:`check` once per turn, just before the request is sent, with the messages
    and tools it will carry — a context policy's ``before_turn`` is the place (after any
    rewriting of the history). A check can also be the agent's context policy on its
    own: ``Agent(context=CacheBusterCheck())`` (it then only checks; it keeps no budget).

    One check serves any number of agents and sessions: share one instance across the
    sessions whose prefixes are to be compared. Sessions of different agents are not
    compared, unless ``group`` puts their agents together.

    Args:
        group: maps an agent's name to the key of the agents that share one prefix
            (default: the name itself). Sessions are compared when their keys are equal,
            and each kind is reported once per key — e.g. ``lambda name: "coder"`` for a
            fleet of agents ``coder-000``, ``coder-001``, … built from one template.
        shared_messages: how many leading messages every session of an agent shares (and
            that are compared across sessions); default: its leading system/developer
            messages. Tool schemas are always part of the shared prefix.
        count: estimates a text's tokens, for ``lost_tokens`` (default: characters / 4).
        max_sessions: sessions remembered for the turn-to-turn comparison (the least
            recently checked are forgotten first).
    """

    def __init__(
        self,
        *,
        group: Callable[[str], str] | None = None,
        shared_messages: int | None = None,
        count: Callable[[str], int] | None = None,
        max_sessions: int = 4096,
    ) -> None:
        if shared_messages is not None and (
            isinstance(shared_messages, bool)
            or not isinstance(shared_messages, int)
            or shared_messages < 0
        ):
            raise ConfigError(
                f"CacheBusterCheck.shared_messages must be an int ≥ 0 or None, "
                f"got {shared_messages!r}"
            )
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError(
                f"CacheBusterCheck.max_sessions must be an int ≥ 1, got {max_sessions!r}"
            )
        self._group = group
        self._shared = shared_messages
        self._count = count or _default_count
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        self._agents: dict[str, _AgentState] = {}
        #: Every warning emitted so far, in order.
        self.warnings: list[CacheBusterWarning] = []

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
        """
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions.move_to_end(session_id)
            n = min(state.pinned, len(messages))
            snapshot = _snapshot(messages, n)
            if snapshot == state.snapshot and _same_objects(tools, state.tools):
                return []
            prefix = _build_prefix(session_id, messages, n, state.shared, tools)
            previous = state.prefix
            state.snapshot, state.tools, state.prefix = snapshot, tuple(tools), prefix
            if prefix.digest == previous.digest:
                return []
            return self._compare(previous, prefix, "turns", agent, turn, emit)
        n_shared = self._n_shared(messages)
        n = min(len(messages), max(n_shared, pinned if pinned is not None else 0))
        prefix = _build_prefix(session_id, messages, n, n_shared, tools)
        self._sessions[session_id] = _SessionState(
            n, n_shared, _snapshot(messages, n), tuple(tools), prefix
        )
        if len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        ag = self._agents.setdefault(self._key(agent), _AgentState())
        warnings: list[CacheBusterWarning] = []
        if prefix.shared_digest in ag.known:
            ag.known.move_to_end(prefix.shared_digest)
            return warnings
        shared = prefix.shared_part()
        if ag.reference is not None:
            warnings = self._compare(ag.reference, shared, "sessions", agent, turn, emit)
        ag.reference = shared
        ag.known[prefix.shared_digest] = None
        if len(ag.known) > _KNOWN_DIGESTS:
            ag.known.popitem(last=False)
        return warnings

    def forget(self, session_id: str) -> None:
        """Drop what is remembered of a session (e.g. when it ended)."""
        self._sessions.pop(session_id, None)

    def bind(
        self,
        *,
        session_id: str,
        agent: str,
        emit: Callable[[Event], None],
        model: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> SessionContext:
        """A per-session context that only runs this check (see :class:`ContextPolicy`)."""
        return _CheckContext(
            self, session_id, agent, cast("Callable[[CacheBusterWarning], None]", emit)
        )

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
        ref: _Prefix,
        cur: _Prefix,
        scope: CacheBusterScope,
        agent: str,
        turn: int | None,
        emit: Callable[[CacheBusterWarning], None] | None,
    ) -> list[CacheBusterWarning]:
        diff = _diff(ref, cur)
        if diff is None:
            return []
        findings, first = diff
        ag = self._agents.setdefault(self._key(agent), _AgentState())
        out: list[CacheBusterWarning] = []
        lost: int | None = None
        for i, f in findings:
            if f.kind in ag.warned:
                continue
            ag.warned.add(f.kind)
            if lost is None:
                lost = self._lost_tokens(cur.texts, first)
            text, ref_text = cur.texts[i], ref.texts[i]
            warning = CacheBusterWarning(
                agent=agent,
                session_id=cur.session_id,
                turn=turn,
                kind=f.kind,
                scope=scope,
                reference_session_id=ref.session_id,
                segment=cur.labels[i],
                start=f.start,
                end=f.end,
                snippet=text[f.start : f.end],
                reference_start=f.ref_start,
                reference_end=f.ref_end,
                reference_snippet=ref_text[f.ref_start : f.ref_end],
                lost_tokens=lost,
            )
            _log.warning(
                "context.cache_buster",
                agent=agent,
                session=cur.session_id,
                turn=turn,
                kind=f.kind,
                scope=scope,
                reference_session=ref.session_id,
                segment=warning.segment,
                span=(f.start, f.end),
                snippet=_clip(warning.snippet),
                reference_snippet=_clip(warning.reference_snippet),
                lost_tokens=lost,
            )
            self.warnings.append(warning)
            out.append(warning)
            if emit is not None:
                emit(warning)
        return out

    def _lost_tokens(self, texts: tuple[str, ...], first: int) -> int:
        total, offset = 0, 0
        for text in texts:
            end = offset + len(text)
            if end > first:
                total += self._count(text[max(0, first - offset) :])
            offset = end
        return total

    def __repr__(self) -> str:
        return (
            f"CacheBusterCheck(agents={len(self._agents)}, sessions={len(self._sessions)}, "
            f"warnings={len(self.warnings)})"
        )


def _same_objects(a: Sequence[Any], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"


class _CheckContext:
    """The per-session context of a :class:`CacheBusterCheck` used as a context policy."""

    __slots__ = ("_agent", "_check", "_emit", "_session_id")

    def __init__(
        self,
        check: CacheBusterCheck,
        session_id: str,
        agent: str,
        emit: Callable[[CacheBusterWarning], None],
    ) -> None:
        self._check = check
        self._session_id = session_id
        self._agent = agent
        self._emit = emit

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Run the check on the prompt about to be sent; nothing is rewritten."""
        self._check.check(self._session_id, self._agent, messages, tools, self._emit, turn=turn)
        return None

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Nothing to learn from the response."""
