"""Where two prompt prefixes differ, and whether only by something volatile.

The text side of :class:`~agentflow.context.CacheBusterCheck`: a pinned prefix as text
segments in the order a chat template renders them (:func:`build_prefix`), a cheap
snapshot of it to compare turn to turn (:func:`snapshot`), and :func:`diff`, which names
what made two prefixes differ — or says they differ for real.

The diff takes the common head and tail of each differing segment and walks both texts
through a window around the difference (:mod:`agentflow.context._bustspans`): volatile
spans (timestamps and dates, UUIDs, long hex or base64 nonces, numbers) may differ, JSON
objects may differ by key order and by volatile spans within, and in the tools' JSON the
same tools may come in another order. Each such cause is a finding — several in one
segment if several apply. Anything else is a real difference (a different instruction),
not a cache buster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentflow._common_runs import common_prefix, common_suffix
from agentflow._context_events import CacheBusterKind
from agentflow.context._bustspans import Finding, explain, explain_tools, json_text

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
        found = explain_tools(a, b) if cur.labels[i] == "tools" else None
        if found is None:
            found = explain(a, b, p, s)
        if found is None:
            return None
        findings.extend((i, f) for f in found)
    if first is None or not findings:
        return None
    return findings, first
