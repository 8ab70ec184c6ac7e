"""What explains the difference inside one segment of two prompt prefixes.

:func:`explain` walks the two texts in step through a window around the difference, piece
by piece: a literal piece must be equal in both; a volatile span (a timestamp, a UUID, a
nonce, a number) may differ if it is of the same kind in both; a JSON object (any ``{``
that decodes in both texts) may differ by the order of its keys and by volatile spans in
its strings and numbers. Every cause met on the way is a finding — a timestamp *and* a
reordered object in one system message are two — and anything else is a real difference.
:func:`explain_tools` does the same for a tool list sent in another order.

The work is bounded as the rest of the diff is: only a window of :data:`MARGIN` characters
around the differing region is walked; a JSON object is decoded only if it lies within
:data:`JSON_REACH` characters of that region (only that slice of the text is handed to the
decoder, so an object closing further away is walked into instead, and an object around the
difference starting further before it is not looked for); at most :data:`JSON_TRIES` ``{``
are decoded per segment by the walk and as many looking for the object around the difference
(an object closing before the difference is skipped whole, its inner ``{`` untried); and only
the first finding of each kind is kept per JSON object (a bust is reported once per kind and
segment anyway).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Literal, TypeAlias

import msgspec

from agentflow._common_runs import common_prefix, common_suffix
from agentflow._context_events import CacheBusterKind

__all__ = ["JSON_REACH", "JSON_TRIES", "MARGIN", "Finding", "explain", "explain_tools", "json_text"]

# How far outside the differing region volatile spans are looked for (a span that
# starts before the first differing character: the "2024-05-01T12:00:0" of a timestamp).
MARGIN = 160
# How many '{' one segment's diff may try to decode as JSON objects.
JSON_TRIES = 32
# How far before and after the differing region a JSON object may reach to be decoded.
JSON_REACH = 4 * MARGIN

_DAY = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_MONTH = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
# A nonce is 16+ hex digits (a letter among them: a long decimal number is a counter) or a
# 20+ character base64 token mixing digits and both cases. A URL-safe one
# (``secrets.token_urlsafe``) may hold '-': it is taken whole only when its pieces look
# random, not like a hyphenated run of words and numbers ("DeepSeek-R1-Distill-Llama-70B",
# "OpenHermes-2-Mixtral-8x7B-AWQ", "useEffect-cleanup-hook-v2"): a digit, a lower-case
# letter followed by an upper-case one, at least 8 switches between lower case, upper case
# and digits from one character to the next within a piece (a random 22-character token
# has about 13, a model name about 3 to 7), and no run of 7 lower-case letters in its
# first 47 characters (a word such as "nstruct"). Each condition looks only at the head of
# the run (the digit and the letter pair in its first 47 characters, each switch within 12
# characters of the one before), so that a long hyphenated run costs linear time. This
# takes about 9 in 10 ``token_urlsafe(16)`` tokens with a '-' (19 in 20 of longer ones)
# and none of the 40-odd model and identifier names in tests/context/test_cachebuster_kinds.py.
_SWITCH = r"(?:[a-z](?=[A-Z0-9])|[A-Z](?=[a-z0-9])|[0-9](?=[A-Za-z]))"
_HYPHEN_NONCE = (
    r"(?=[A-Za-z0-9+/_-]{0,46}?\d)(?=[A-Za-z0-9+/_-]{0,45}?[a-z][A-Z])"
    rf"(?=(?>(?:(?!{_SWITCH})[A-Za-z0-9+/_-]){{0,11}}{_SWITCH}){{8}})"
    r"(?![A-Za-z0-9+/_-]{0,40}[a-z]{7})"
    r"[A-Za-z0-9+/_-]{20,}={0,2}"
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
          (?=\d*[a-fA-F])[0-9a-fA-F]{{16,}}
        | {_HYPHEN_NONCE}
        | (?<![+/_])  # a run's start only: its look-aheads scan to the run's end
          (?=[A-Za-z0-9+/_]*\d)(?=[A-Za-z0-9+/_]*[a-z])(?=[A-Za-z0-9+/_]*[A-Z])
          [A-Za-z0-9+/_]{{20,}}={{0,2}}
      )
    | (?P<counter>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    )(?![0-9A-Za-z])""",
    re.VERBOSE,
)
_KINDS: tuple[CacheBusterKind, ...] = ("uuid", "timestamp", "nonce", "counter")


def json_text(value: Any, *, sort: bool = False) -> str:
    """``value`` as compact JSON (msgspec), its keys sorted if ``sort``."""
    order: Literal["sorted"] | None = "sorted" if sort else None
    return msgspec.json.encode(value, enc_hook=str, order=order).decode()


@dataclass(frozen=True, slots=True)
class Finding:
    kind: CacheBusterKind
    start: int
    end: int
    ref_start: int
    ref_end: int

    def moved(self, by: int, ref_by: int) -> Finding:
        return Finding(
            self.kind,
            self.start + by,
            self.end + by,
            self.ref_start + ref_by,
            self.ref_end + ref_by,
        )


_Token: TypeAlias = tuple[CacheBusterKind | None, str, int, int]


def _kind(m: re.Match[str]) -> CacheBusterKind:
    return next(k for k in _KINDS if m.group(k) is not None)


def _tokens(text: str) -> Iterator[_Token]:
    """``text`` as literal pieces and volatile spans: (kind or None, text, start, end)."""
    pos = 0
    for m in _VOLATILE.finditer(text):
        if m.start() > pos:
            yield None, text[pos : m.start()], pos, m.start()
        yield _kind(m), m.group(), m.start(), m.end()
        pos = m.end()
    if pos < len(text):
        yield None, text[pos:], pos, len(text)


def _volatile_pairs(ref: str, cur: str) -> list[tuple[CacheBusterKind, str, str]] | None:
    """The differing volatile spans of two short texts (a JSON string or number), as
    (kind, current, reference) — ``None`` if masking them leaves the texts different."""
    out: list[tuple[CacheBusterKind, str, str]] = []
    for t_ref, t_cur in zip_longest(_tokens(ref), _tokens(cur)):
        if t_ref is None or t_cur is None:
            return None
        if t_ref[0] != t_cur[0] or (t_cur[0] is None and t_ref[1] != t_cur[1]):
            return None
        if t_cur[0] is not None and t_ref[1] != t_cur[1]:
            out.append((t_cur[0], t_cur[1], t_ref[1]))
    return out


@dataclass(frozen=True, slots=True)
class _Num:
    """A JSON number as written (``1e-05`` and ``0.00001`` differ in the prompt)."""

    text: str


_DECODER = json.JSONDecoder(parse_int=_Num, parse_float=_Num, parse_constant=_Num)
_Found: TypeAlias = dict[CacheBusterKind, tuple[str, str]]


def _same_json(ref: Any, cur: Any, found: _Found) -> bool:
    """Whether two decoded values are equal but for key order and volatile spans; the
    first (current, reference) texts of each cause go to ``found``."""
    if type(ref) is not type(cur):
        return False
    if isinstance(ref, dict):
        if ref.keys() != cur.keys():
            return False
        if list(ref) != list(cur):
            found.setdefault("reordered_keys", ("", ""))
        return all(_same_json(ref[k], cur[k], found) for k in ref)
    if isinstance(ref, list):
        return len(ref) == len(cur) and all(
            _same_json(a, b, found) for a, b in zip(ref, cur, strict=True)
        )
    if ref == cur:
        return True
    if isinstance(ref, _Num):
        if ref.text.startswith("-") != cur.text.startswith("-"):
            return False
        ref, cur = ref.text.lstrip("-"), cur.text.lstrip("-")
    if not isinstance(ref, str):
        return False  # true/false/null
    pairs = _volatile_pairs(ref, cur)
    if pairs is None:
        return False
    for kind, x_cur, x_ref in pairs:
        found.setdefault(kind, (x_cur, x_ref))
    return True


def _span_of(text: str, token: str, start: int, end: int) -> tuple[int, int]:
    """Where the volatile span ``token`` first shows in ``text[start:end]`` (the whole of
    it if it cannot be found, e.g. behind a JSON escape)."""
    for m in _VOLATILE.finditer(text, start, end):
        if m.group() == token:
            return m.start(), m.end()
    return start, end


class _Walk:
    """Two texts walked in step, how many JSON objects may still be decoded, and where
    the decodable slice of each text ends (``JSON_REACH`` past the differing region)."""

    def __init__(self, ref: str, cur: str, s: int) -> None:
        self.ref, self.cur = ref, cur
        self.tries = JSON_TRIES
        tail = max(0, s - JSON_REACH)
        self.stop_ref, self.stop_cur = len(ref) - tail, len(cur) - tail

    def objects(self, i: int, j: int) -> tuple[list[Finding] | None, int, int] | None:
        """The findings in the JSON objects at ``ref[i]`` and ``cur[j]`` (``None`` if they
        differ for real), and where the objects end; ``None`` if either does not decode."""
        if self.tries <= 0:
            return None
        self.tries -= 1
        a = _decode(self.ref, i, self.stop_ref)
        b = _decode(self.cur, j, self.stop_cur) if a is not None else None
        if a is None or b is None:
            return None
        (v_ref, e_ref), (v_cur, e_cur) = a, b
        if self.ref[i:e_ref] == self.cur[j:e_cur]:
            return [], e_ref, e_cur
        found: _Found = {}
        try:
            same = _same_json(v_ref, v_cur, found)
        except RecursionError:
            same = False
        if not same:
            return None, e_ref, e_cur
        out = []
        for kind, (x_cur, x_ref) in found.items():
            if kind == "reordered_keys":
                out.append(Finding(kind, j, e_cur, i, e_ref))
            else:
                c0, c1 = _span_of(self.cur, x_cur, j, e_cur)
                r0, r1 = _span_of(self.ref, x_ref, i, e_ref)
                out.append(Finding(kind, c0, c1, r0, r1))
        return out, e_ref, e_cur

    def enclosing(self, p: int, start: int) -> int:
        """The start of the outermost JSON object that holds the first differing character
        ``p`` — the first ``{`` before ``start`` but at most ``JSON_REACH`` before ``p`` whose
        object does, looked for front to back and skipping each object that closes before
        ``p`` whole (with the ``{`` in it), at most ``JSON_TRIES`` of them — else ``start``.
        It has its own tries: records closing before the difference must not use up the
        walk's (a reordered object right at the difference would go unseen)."""
        at = max(0, p - JSON_REACH)
        for _ in range(JSON_TRIES):
            at = self.ref.find("{", at, start)
            if at < 0:
                break
            a = _decode(self.ref, at, self.stop_ref)
            if a is not None and a[1] <= p:
                at = a[1]  # closes before the difference: so does every object in it
                continue
            b = _decode(self.cur, at, self.stop_cur) if a is not None else None
            if b is not None and b[1] > p:
                return at
            at += 1
        return start


def _decode(text: str, at: int, stop: int) -> tuple[Any, int] | None:
    """The JSON value at ``text[at]`` and where it ends, if it ends by ``stop`` (only
    ``text[at:stop]`` is decoded)."""
    try:
        value, end = _DECODER.raw_decode(text[at:stop])
    except (ValueError, RecursionError):
        return None
    return value, at + end


def explain(ref: str, cur: str, p: int, s: int) -> list[Finding] | None:
    """The findings that explain how ``cur`` differs from ``ref`` — ``p`` their common head,
    ``s`` their common tail — or ``None`` if something real differs."""
    walk = _Walk(ref, cur, s)
    i = j = walk.enclosing(p, max(0, p - MARGIN))
    tail = max(0, s - MARGIN)
    end_ref, end_cur = len(ref) - tail, len(cur) - tail
    found: list[Finding] = []
    m_ref = m_cur = None
    searched = False
    while not (len(ref) - i == len(cur) - j <= s):
        if i >= end_ref or j >= end_cur:
            return None
        if ref[i] == "{" and cur[j] == "{":
            objects = walk.objects(i, j)
            if objects is not None:
                inner, i, j = objects
                if inner is None:
                    return None
                found.extend(inner)
                continue
        # The next volatile span of each text, searched again only once passed (none
        # left stays none: the walk only moves forward).
        if (m_ref is not None and m_ref.start() < i) or not searched:
            m_ref = _VOLATILE.search(ref, i, end_ref)
        if (m_cur is not None and m_cur.start() < j) or not searched:
            m_cur = _VOLATILE.search(cur, j, end_cur)
        searched = True
        at_ref = m_ref is not None and m_ref.start() == i
        at_cur = m_cur is not None and m_cur.start() == j
        if at_ref or at_cur:
            if m_ref is None or m_cur is None or not (at_ref and at_cur):
                return None
            kind = _kind(m_cur)
            if _kind(m_ref) != kind:
                return None
            if m_ref.group() != m_cur.group():
                found.append(Finding(kind, j, m_cur.end(), i, m_ref.end()))
            i, j = m_ref.end(), m_cur.end()
            continue
        # A literal piece: up to the next volatile span or '{' (one character at least).
        b_ref = _next_stop(ref, i, end_ref, m_ref)
        b_cur = _next_stop(cur, j, end_cur, m_cur)
        if ref[i:b_ref] != cur[j:b_cur]:
            return None
        i, j = b_ref, b_cur
    return found or None


def _next_stop(text: str, at: int, end: int, m: re.Match[str] | None) -> int:
    stop = m.start() if m is not None else end
    brace = text.find("{", at + 1, stop)
    return brace if brace >= 0 else stop


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


def _masked(tool: Any) -> str:
    return _VOLATILE.sub(lambda m: f"\0{_kind(m)}\0", json_text(tool, sort=True))


def explain_tools(ref: str, cur: str) -> list[Finding] | None:
    """The same tool schemas in another order — some maybe with volatile spans or keys in
    another order too: a ``reordered_tools`` finding from the first moved tool to the last
    one, and what else differs within the tools. ``None`` if the order is the same (then
    :func:`explain` looks) or the tools differ for real."""
    try:
        a, b = json.loads(ref), json.loads(cur)
    except (ValueError, RecursionError):
        return None
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return None
    ka, kb = [_masked(t) for t in a], [_masked(t) for t in b]
    if ka == kb or sorted(ka) != sorted(kb):
        return None
    moved = [i for i, (x, y) in enumerate(zip(ka, kb, strict=True)) if x != y]
    spans_a, spans_b = _element_spans(ref, a), _element_spans(cur, b)
    if spans_a is None or spans_b is None:
        return [Finding("reordered_tools", 0, len(cur), 0, len(ref))]
    lo, hi = moved[0], moved[-1]
    out = [
        Finding("reordered_tools", spans_b[lo][0], spans_b[hi][1], spans_a[lo][0], spans_a[hi][1])
    ]
    unused: dict[str, list[int]] = {}
    for n in reversed(range(len(ka))):
        unused.setdefault(ka[n], []).append(n)
    for n, key in enumerate(kb):
        (r0, r1), (c0, c1) = spans_a[unused[key].pop()], spans_b[n]
        x_ref, x_cur = ref[r0:r1], cur[c0:c1]
        if x_ref == x_cur:
            continue
        p = common_prefix(x_ref, x_cur)
        within = explain(x_ref, x_cur, p, common_suffix(x_ref, x_cur, min(r1 - r0, c1 - c0) - p))
        if within is None:
            return None
        out.extend(f.moved(c0, r0) for f in within)
    return out
