"""Counting chat messages the way chat templates render them, incrementally.

A template wraps every message in a few special tokens (``<|im_start|>role\\n … <|im_end|>``)
and primes the reply with a few more; tools go in as JSON. :class:`MessageCounter`
counts a message as ``per_message`` + its role + its content (text parts of a list
content; ``per_image`` per image part) + each tool call's name and arguments, plus
``per_name`` + the name when a message has one; a prompt adds the tools' JSON and
``reply_priming``. The defaults (3, 1, 3) are OpenAI's published figures for its chat
models; other templates differ by a few tokens per message, which the
:class:`~agentflow.context.Calibrator` learns from the server's reported counts.

**Cache keys.** Messages are mutable dicts, so neither ``id()`` (reused after garbage
collection, blind to in-place edits) nor the dict itself (unhashable) can key a cache.
A message's count is keyed by its *content*: the message frozen into nested tuples
(dicts to ``(key, value)`` pairs in their order, lists to tuples) — equal messages share
an entry, and any edit, nested ones included, makes a new key. A lookup costs a few
microseconds per message (the strings are shared, not copied, and Python caches
a string's hash on the string), so a stateless :meth:`MessageCounter.count_prompt`
costs O(messages) lookups plus tokenization of the messages it has never seen. The
cache is an LRU of ``cache_size`` entries, shared by every session of a budget; a
session's :class:`~agentflow.context.PromptCounter` keeps the counts of its own history
(by the message objects), so an eviction never makes it tokenize one of them again.

:meth:`MessageCounter.session` makes a :class:`~agentflow.context.PromptCounter`, which
follows one session's history and counts, each turn, only what changed since the last.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from agentflow._content_parts import IMAGE_PARTS, IMAGE_TOKENS, TEXT_PARTS
from agentflow._counts import check_count
from agentflow.context._counting import TokenCounter
from agentflow.context._prompt import ChangeCheck, PromptCounter

__all__ = ["IMAGE_TOKEN", "MESSAGE_TOKEN", "NAME_TOKEN", "MessageCounter"]


#: Stand-in id for one token of per-message template overhead in :meth:`MessageCounter.render`.
MESSAGE_TOKEN: Final = -1
#: Stand-in id for one token of per-name overhead.
NAME_TOKEN: Final = -2
#: Stand-in id for one token of an image part.
IMAGE_TOKEN: Final = -3

#: The most messages, and token ids, :class:`MessageCounter` keeps rendered for a
#: fingerprint to take (the newest is always kept): a turn's new messages, a sweep's
#: rewritten ones — about 49 tool outputs cut to 512 tokens and a 20k-token new one at
#: a 1M window — with room to spare.
_RECENT_MESSAGES: Final = 64
_RECENT_IDS: Final = 131_072

_LIST: Final = object()


def _freeze(obj: Any) -> Hashable:
    """A hashable, content-equal image of a JSON-like value."""
    t = type(obj)
    if t is str or obj is None or t is int or t is float or t is bool:
        return obj  # type: ignore[no-any-return]
    if t is dict:
        return tuple([(k, _freeze(v)) for k, v in obj.items()])
    if t is list or t is tuple:
        return (_LIST, *[_freeze(v) for v in obj])
    if isinstance(obj, str | int | float):
        return obj
    if isinstance(obj, Mapping):
        return tuple([(k, _freeze(v)) for k, v in obj.items()])
    if isinstance(obj, list | tuple):
        return (_LIST, *[_freeze(v) for v in obj])
    return (type(obj).__qualname__, repr(obj))


def _nonneg(field: str, value: int) -> int:
    return check_count(value, f"MessageCounter.{field}", 0)


class MessageCounter:
    """Counts chat messages, tools and whole prompts, with a per-message cache.

    Not thread-safe: use one per event loop (a fleet's sessions share one).

    Args:
        counter: the text tokenizer (:class:`~agentflow.context.TiktokenCounter`,
            :class:`~agentflow.context.HFTokenizerCounter`, …).
        per_message: template tokens around each message.
        per_name: extra tokens for a message's ``name`` field.
        reply_priming: tokens that start the assistant's reply.
        per_image: tokens counted per image part (85: OpenAI's low-detail figure).
        cache_size: messages whose counts are kept (LRU).

    Raises:
        ConfigError: a negative overhead or a cache size below 1.
    """

    def __init__(
        self,
        counter: TokenCounter,
        *,
        per_message: int = 3,
        per_name: int = 1,
        reply_priming: int = 3,
        per_image: int = IMAGE_TOKENS,
        cache_size: int = 16_384,
    ) -> None:
        self.counter = counter
        self.per_message = _nonneg("per_message", per_message)
        self.per_name = _nonneg("per_name", per_name)
        self.reply_priming = _nonneg("reply_priming", reply_priming)
        self.per_image = _nonneg("per_image", per_image)
        self.cache_size = check_count(cache_size, "MessageCounter.cache_size")
        self._encode = counter.encode
        self._counts: OrderedDict[Hashable, int] = OrderedDict()
        # The token ids of the last few messages rendered, so that a fingerprint taken
        # right after a count does not tokenize the same new message twice: at most
        # _RECENT_MESSAGES of them and _RECENT_IDS ids (the newest is always kept). A few
        # turns' worth — longer would keep every 20k-token output's 20k int objects alive
        # for dozens of turns: memory, and work for the garbage collector, which walks
        # every list it tracks, not for reuse (a fingerprint takes them the same turn).
        self._recent: OrderedDict[Hashable, list[int]] = OrderedDict()
        self._recent_ids = 0
        self._tools_key: str | None = None
        self._tools_tokens: list[int] = []
        #: Cache hits and misses of :meth:`count_message`, for tests and tuning.
        self.hits = 0
        self.misses = 0

    # -- rendering ------------------------------------------------------------------------

    def render(self, message: Mapping[str, Any]) -> list[int]:
        """The token ids a template would spend on ``message``: its text's real ids, with
        the negative stand-ins :data:`MESSAGE_TOKEN`, :data:`NAME_TOKEN` and
        :data:`IMAGE_TOKEN` for template overhead and images. ``len()`` of it is the
        message's count; prefix fingerprints hash it.
        """
        key = _freeze(message)
        ids = self._recent.get(key)
        if ids is None:
            ids = self._render(message)
            self._remember(key, ids)
        return ids

    def recent(self, message: Mapping[str, Any]) -> list[int] | None:
        """:meth:`render`'s ids of ``message`` if it was rendered lately (they are still
        kept), else ``None``: never tokenizes."""
        return self._recent.get(_freeze(message))

    def _remember(self, key: Hashable, ids: list[int]) -> None:
        recent = self._recent
        old = recent.pop(key, None)
        if old is not None:
            self._recent_ids -= len(old)
        recent[key] = ids
        self._recent_ids += len(ids)
        while len(recent) > 1 and (
            len(recent) > _RECENT_MESSAGES or self._recent_ids > _RECENT_IDS
        ):
            self._recent_ids -= len(recent.popitem(last=False)[1])
        counts = self._counts
        counts[key] = len(ids)
        if len(counts) > self.cache_size:
            counts.popitem(last=False)

    def _render(self, message: Mapping[str, Any]) -> list[int]:
        enc = self._encode
        out = [MESSAGE_TOKEN] * self.per_message
        role = message.get("role")
        if isinstance(role, str):
            out += enc(role)
        content = message.get("content")
        if isinstance(content, str):
            out += enc(content)
        elif isinstance(content, list | tuple):
            for part in content:
                out += self._part(part)
        elif content is not None:
            out += enc(json.dumps(content, ensure_ascii=False, default=str))
        name = message.get("name")
        if isinstance(name, str) and name:
            out += [NAME_TOKEN] * self.per_name
            out += enc(name)
        calls = message.get("tool_calls")
        if isinstance(calls, list | tuple):
            for call in calls:
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping):
                    continue
                fname = fn.get("name")
                if isinstance(fname, str):
                    out += enc(fname)
                args = fn.get("arguments")
                if isinstance(args, str):
                    out += enc(args)
                elif args is not None:
                    out += enc(json.dumps(args, ensure_ascii=False, default=str))
        return out

    def _part(self, part: Any) -> list[int]:
        if isinstance(part, str):
            return self._encode(part)
        if not isinstance(part, Mapping):
            return self._encode(json.dumps(part, ensure_ascii=False, default=str))
        kind = part.get("type")
        text = part.get("text")
        if isinstance(text, str) and kind in TEXT_PARTS:
            return self._encode(text)
        if kind in IMAGE_PARTS:
            return [IMAGE_TOKEN] * self.per_image
        return self._encode(json.dumps(part, ensure_ascii=False, default=str))

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """The token ids of the tool schemas as templates send them: one JSON object per
        line, keys in their given order (an order change is a different prompt)."""
        if not tools:
            return []
        text = "\n".join(json.dumps(t, ensure_ascii=False, default=str) for t in tools)
        if text != self._tools_key:
            self._tools_tokens = self._encode(text)
            self._tools_key = text
        return self._tools_tokens

    # -- counting -------------------------------------------------------------------------

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens ``message`` costs in a prompt, template overhead included (cached)."""
        key = _freeze(message)
        counts = self._counts
        n = counts.get(key)
        if n is not None:
            self.hits += 1
            counts.move_to_end(key)
            return n
        self.misses += 1
        ids = self._render(message)
        self._remember(key, ids)
        return len(ids)

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens the tool schemas cost (their JSON); 0 for no tools."""
        return len(self.render_tools(tools))

    def count_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """Tokens of the whole prompt: every message, the tools and the reply priming.

        Costs one cache lookup per message and tokenization of unseen messages only;
        for a session's growing history :meth:`session` is cheaper still.
        """
        count = self.count_message
        return sum(count(m) for m in messages) + self.count_tools(tools) + self.reply_priming

    def session(self, *, check: ChangeCheck = "identity") -> PromptCounter:
        """A per-session :class:`PromptCounter` that counts only what changed since its
        last call; drop it when the session ends.

        Raises:
            ConfigError: an unknown ``check``.
        """
        return PromptCounter(self, check=check)

    def __repr__(self) -> str:
        return (
            f"MessageCounter({self.counter!r}, per_message={self.per_message}, "
            f"per_name={self.per_name}, reply_priming={self.reply_priming})"
        )
