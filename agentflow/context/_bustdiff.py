"""Where two prompt prefixes differ, and whether only by something volatile.

The text side of :class:`~agentflow.context.CacheBusterCheck`: a pinned prefix as text
segments in the order a chat template renders them (:func:`build_prefix`), a cheap
snapshot of it to compare turn to turn (:func:`snapshot`), and :func:`diff`, which names
what made two prefixes differ — or says they differ for real.

The diff takes the common head and tail of each differing segment and, in a window
around the difference, masks volatile spans (timestamps and dates, UUIDs, long hex or
base64 nonces, numbers) in both texts; when the masked texts are equal, each differing
span is a finding. Otherwise it looks for one JSON object whose keys were reordered, and
in the tools' JSON for the same tools in another order. Anything else is a real
difference (a different instruction), not a cache buster.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Literal, TypeAlias

import msgspec

from agentflow._common_runs import common_prefix, common_suffix
from agentflow._context_events import CacheBusterKind

__all__ = [
    "CacheBusterKind",
    "Finding",
    "Prefix",
    "build_prefix",
    "diff",
    "message_texts",
    "snapshot",
]


_SYSTEM_ROLES = frozenset({"system", "developer"})
# How far outside the differing region volatile spans are looked for (a span that
# starts before the first differing character: the "2024-05-01T12:00:0" of a timestamp).
_MARGIN = 160
# How many candidate '{' a reordered-keys search tries, innermost first.
_JSON_TRIES = 32


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


def json_text(value: Any, *, sort: bool = False) -> str:
    """``value`` as compact JSON (msgspec), its keys sorted if ``sort``."""
    order: Literal["sorted"] | None = "sorted" if sort else None
    return msgspec.json.encode(value, enc_hook=str, order=order).decode()


@dataclass(frozen=True, slots=True)
class Prefix:
    """A pinned prefix as text segments, in the order a chat template renders them."""

    labels: tuple[str, ...]
    texts: tuple[str, ...]
    #: How many leading segments every session of the agent shares.
    shared: int
    shared_digest: bytes
    digest: bytes
    session_id: str

    def shared_part(self) -> Prefix:
        """The segments every session of the agent shares."""
        if self.shared == len(self.texts):
            return self
        return Prefix(
            self.labels[: self.shared],
            self.texts[: self.shared],
            self.shared,
            self.shared_digest,
            self.shared_digest,
            self.session_id,
        )


def build_prefix(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    n_pinned: int,
    n_shared: int,
    tools: Sequence[Mapping[str, Any]],
) -> Prefix:
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
    texts.append(json_text(list(tools)))
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
    return Prefix(tuple(labels), tuple(texts), shared, shared_digest or digest, digest, session_id)


def _add_message(labels: list[str], texts: list[str], i: int, message: Mapping[str, Any]) -> None:
    labels.append(f"messages[{i}]")
    labels.append(f"messages[{i}].fields")
    texts.extend(message_texts(message))


def message_texts(message: Mapping[str, Any]) -> tuple[str, str]:
    """A message as two texts: its content, and its other keys as JSON.

    Templates read a message's keys by name, so their order does not reach the prompt:
    anything but a string content is written with its keys sorted.
    """
    content = message.get("content")
    return (
        content if isinstance(content, str) else json_text(content, sort=True),
        json_text({k: v for k, v in message.items() if k != "content"}, sort=True),
    )


def snapshot(messages: Sequence[Mapping[str, Any]], n: int) -> tuple[Any, ...]:
    """What the pinned messages hold, cheap to take and to compare.

    String values are kept as they are (comparison is by identity first, then memcmp);
    anything else as its JSON text, so an in-place change — or reordered keys, which
    ``==`` on dicts ignores — is seen.
    """
    return tuple(
        tuple((k, v if type(v) is str else json_text(v)) for k, v in m.items())
        for m in messages[:n]
    )


@dataclass(frozen=True, slots=True)
class Finding:
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


def _volatile_only(ref: str, cur: str, p: int, s: int) -> list[Finding] | None:
    """The differing volatile spans, if masking them makes the two texts equal.

    Only a window around the differing region is tokenised (the texts are equal
    outside it), and the two token streams stop at the first real difference.
    """
    start = max(0, p - _MARGIN)
    tail = max(0, s - _MARGIN)
    pairs = zip_longest(
        _tokens(ref[start : len(ref) - tail], start), _tokens(cur[start : len(cur) - tail], start)
    )
    found: list[Finding] = []
    for t_ref, t_cur in pairs:
        if t_ref is None or t_cur is None:
            return None
        k_ref, x_ref, s_ref, e_ref = t_ref
        k_cur, x_cur, s_cur, e_cur = t_cur
        if k_ref != k_cur or (k_cur is None and x_ref != x_cur):
            return None
        if k_cur is not None and x_ref != x_cur:
            found.append(Finding(k_cur, s_cur, e_cur, s_ref, e_ref))
    return found or None


def _reordered(ref: str, cur: str, p: int, s: int) -> Finding | None:
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
            return Finding("reordered_keys", at, end_cur, at, end_ref)
    return None


def _element_spans(text: str, items: list[Any]) -> list[tuple[int, int]] | None:
    """Where each item of a JSON array lies in its compact text (``None`` if the items do
    not re-encode to exactly that text)."""
    parts = [json_text(item) for item in items]
    if "[" + ",".join(parts) + "]" != text:
        return None
    spans, at = [], 1
    for part in parts:
        spans.append((at, at + len(part)))
        at += len(part) + 1
    return spans


def _reordered_tools(ref: str, cur: str) -> Finding | None:
    """The same tool schemas in another order: the span from the first moved tool to the
    last one, in each text."""
    try:
        a, b = json.loads(ref), json.loads(cur)
    except ValueError:
        return None
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return None
    ka = [json_text(t, sort=True) for t in a]
    kb = [json_text(t, sort=True) for t in b]
    if ka == kb or sorted(ka) != sorted(kb):
        return None
    moved = [i for i, (x, y) in enumerate(zip(ka, kb, strict=True)) if x != y]
    spans_a, spans_b = _element_spans(ref, a), _element_spans(cur, b)
    if spans_a is None or spans_b is None:
        return Finding("reordered_tools", 0, len(cur), 0, len(ref))
    lo, hi = moved[0], moved[-1]
    return Finding(
        "reordered_tools", spans_b[lo][0], spans_b[hi][1], spans_a[lo][0], spans_a[hi][1]
    )


def diff(ref: Prefix, cur: Prefix) -> tuple[list[tuple[int, Finding]], int] | None:
    """Findings per differing segment, and the first differing character (in ``cur``'s
    concatenated segments); ``None`` when the prefixes differ for real."""
    if ref.labels != cur.labels:
        return None
    findings: list[tuple[int, Finding]] = []
    first: int | None = None
    offset = 0
    for i, (a, b) in enumerate(zip(ref.texts, cur.texts, strict=True)):
        if a is b or a == b:
            offset += len(b)
            continue
        p = common_prefix(a, b)
        s = common_suffix(a, b, min(len(a), len(b)) - p)
        if first is None:
            first = offset + p
        offset += len(b)
        volatile = _volatile_only(a, b, p, s)
        if volatile is not None:
            findings.extend((i, f) for f in volatile)
            continue
        reordered = _reordered_tools(a, b) if cur.labels[i] == "tools" else None
        if reordered is None:
            reordered = _reordered(a, b, p, s)
        if reordered is None:
            return None
        findings.append((i, reordered))
    if first is None or not findings:
        return None
    return findings, first
