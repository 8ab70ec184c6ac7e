"""Compaction: summarise a session's older turns with a model call.

The summary replaces the older units and goes right after the pinned prefix, so the
prefix — system prompt, tool schemas, pinned first messages — stays byte-identical and
keeps hitting the server's prefix cache. The most recent units are kept verbatim, whole
(an assistant tool call with its results), so the session resumes exactly where it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._session_checks import PARAMS_RESERVED
from agentflow.context._events import CompactionEvent
from agentflow.context._overflow import OverflowView, TokenEstimator
from agentflow.transport._request import ChatRequest

__all__ = ["DEFAULT_SUMMARY_PROMPT", "Compact", "render_transcript"]

#: The instructions the summariser gets by default.
DEFAULT_SUMMARY_PROMPT = (
    "You compact the history of an AI agent's session so that it can continue its task "
    "without the original messages. Summarise the transcript you are given: the task and its "
    "goal, what was done (tool calls and what they returned, with the exact file names, "
    "identifiers, numbers and errors that matter), decisions taken, and what remains to do. "
    "Be factual and concise. Write only the summary."
)


# Tool results in a transcript are never cut below this many tokens to make it fit.
_MIN_TOOL_TOKENS = 32
# Between a transcript's paragraphs; after a tool result's head where the rest was cut.
_SEPARATOR = "\n\n"
_CUT_MARK = " […]"
# Output sizes params may not set: max_summary_tokens is the one.
_OUTPUT_SIZES = frozenset({"max_tokens", "max_completion_tokens"})


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return json.dumps(content, ensure_ascii=False)


def _content_tokens(estimator: TokenEstimator, message: Mapping[str, Any]) -> int:
    """The estimate of ``message``'s string content, from counts the session has: the
    message's less that of the same message with nothing in it (its role and name only:
    one such message stands for every message of a role, and is counted once). No
    tokenizing: the session counted the message when it was appended."""
    empty = {k: v for k, v in message.items() if k in ("role", "name")}
    empty["content"] = ""
    return max(0, estimator.message(message) - estimator.message(empty))


@dataclass(frozen=True, slots=True)
class _Part:
    """One message of a transcript: its heading, its text and that text's estimate
    (``exact``: the text's own, not its message's less an empty one's)."""

    head: str
    text: str
    tokens: int
    tool: bool
    exact: bool


def _parts(messages: Sequence[Mapping[str, Any]], estimator: TokenEstimator) -> list[_Part]:
    """The transcript's paragraphs, each with its text's estimate: a message's own count
    where its content is a plain string (no tokenizing), else its text counted."""
    parts: list[_Part] = []
    for m in messages:
        role = str(m.get("role", "user"))
        content = m.get("content")
        text = _content_text(content)
        plain = isinstance(content, str) and not m.get("tool_calls")
        if role == "tool":
            head = f"[tool result {m.get('tool_call_id', '')}]\n"
            tokens = _content_tokens(estimator, m) if plain else estimator.text(text)
            parts.append(_Part(head, text, tokens, True, not plain))
            continue
        calls = [
            f"→ calls {c.get('function', {}).get('name', '?')}"
            f"({c.get('function', {}).get('arguments', '')}) as {c.get('id', '')}"
            for c in m.get("tool_calls") or ()
        ]
        body = "\n".join([text, *calls] if text else calls)
        tokens = _content_tokens(estimator, m) if plain else estimator.text(body)
        parts.append(_Part(f"[{role}]\n", body, tokens, False, not plain))
    return parts


def _render(
    parts: Sequence[_Part], estimator: TokenEstimator, tool_output_tokens: int
) -> tuple[str, int]:
    """The transcript of ``parts``, tool results cut to ``tool_output_tokens``, and its
    estimate: the sum of its pieces' (only the heads kept of long results are tokenized)."""
    est = estimator
    out: list[str] = []
    size = est.text(_SEPARATOR) * max(0, len(parts) - 1)
    for p in parts:
        text, tokens = p.text, p.tokens
        if p.tool and not p.exact and tokens in (tool_output_tokens, tool_output_tokens + 1):
            # The message's count less an empty one's may be a token off the text's own
            # (each is rounded after calibration): at the boundary, count the text.
            tokens = est.text(text)
        if p.tool and tokens > tool_output_tokens:
            head = est.cut(text, tool_output_tokens)
            tokens = est.text(head) + est.text(_CUT_MARK)  # the head's count is kept: free
            text = head + _CUT_MARK
        out.append(p.head + text)
        size += est.text(p.head) + tokens
    return _SEPARATOR.join(out), size


def render_transcript(
    messages: Sequence[Mapping[str, Any]],
    estimator: TokenEstimator,
    *,
    tool_output_tokens: int,
) -> str:
    """The plain-text transcript of ``messages`` the summariser reads.

    One paragraph per message, headed by its role; tool calls show their name and
    arguments; tool results longer than ``tool_output_tokens`` keep only their head.
    A result's length is its message's estimate less an empty message's (as
    :class:`~agentflow.context.TruncateToolOutputs` reckons it): a long output is never
    tokenized whole, only the head it keeps.
    """
    return _render(_parts(messages, estimator), estimator, tool_output_tokens)[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Compact:
    """Summarises older turns with a model call; the summary follows the pinned prefix.

    The most recent units are kept verbatim: up to ``keep_last`` of them, as long as
    they use at most ``keep_fraction`` of the limit (the newest one is always kept).
    Everything between the pinned prefix and them — a previous summary included — is
    rendered as a transcript and summarised by ``model`` (the session's own model by
    default) through the session's ``complete``, so the call goes through the same
    admission gate and counts toward fleet budgets. A :class:`CompactionEvent` reports
    it. If the summary comes back empty, nothing changes and the chain goes on.

    Args:
        prompt: the summariser's instructions (its system message).
        model: the model that writes summaries; ``None``: the session's model.
        max_summary_tokens: the summary request's ``max_tokens``.
        keep_last: the most recent units kept verbatim, at most.
        keep_fraction: the kept units' share of the limit, at most.
        role: the role of the summary message.
        summary_prefix: the text before the summary in its message.
        params: extra body fields of the summary request (``temperature``, …); not
            ``max_tokens`` nor ``max_completion_tokens`` (a :class:`ConfigError`): the
            output size is ``max_summary_tokens``, which the transcript is sized for.
        tool_output_tokens: tool results in the transcript are cut to this many tokens.
        max_input_tokens: the transcript's size limit; by default 90% of the window less
            the summary's ``max_tokens`` and prompt. Beyond it, tool results in the
            transcript are cut harder (halving down to 32 tokens), then its oldest part.
    """

    prompt: str = DEFAULT_SUMMARY_PROMPT
    model: str | None = None
    max_summary_tokens: int = 512
    keep_last: int = 2
    keep_fraction: float = 0.5
    role: Literal["user", "system", "assistant"] = "user"
    summary_prefix: str = "Summary of the conversation so far:\n"
    params: Mapping[str, Any] = field(default_factory=dict)
    tool_output_tokens: int = 1024
    max_input_tokens: int | None = None
    name: str = "compact"

    def __hash__(self) -> int:
        # Every field but ``params`` (a dict, unhashable: the generated hash raised
        # TypeError); equal policies have equal fields, so equal hashes.
        return hash(
            (self.prompt, self.model, self.max_summary_tokens, self.keep_last,
             self.keep_fraction, self.role, self.summary_prefix, self.tool_output_tokens,
             self.max_input_tokens, self.name)
        )  # fmt: skip

    def __post_init__(self) -> None:
        for fname in ("max_summary_tokens", "keep_last", "tool_output_tokens"):
            check_count(getattr(self, fname), f"Compact.{fname}")
        check_count(self.max_input_tokens, "Compact.max_input_tokens", none="from the window")
        kf = self.keep_fraction
        if isinstance(kf, bool) or not isinstance(kf, int | float) or not 0 < kf <= 1:
            raise ConfigError(f"Compact.keep_fraction must be a number in (0, 1], got {kf!r}")
        if self.role not in ("user", "system", "assistant"):
            raise ConfigError(
                f"Compact.role must be 'user', 'system' or 'assistant', got {self.role!r}"
            )
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ConfigError(f"Compact.prompt must be a non-empty string, got {self.prompt!r}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigError(f"Compact.model must be a model name or None, got {self.model!r}")
        if not isinstance(self.summary_prefix, str):
            raise ConfigError(
                f"Compact.summary_prefix must be a string, got {self.summary_prefix!r}"
            )
        if not isinstance(self.params, Mapping):
            raise ConfigError(f"Compact.params must be a mapping, got {self.params!r}")
        bad = PARAMS_RESERVED.intersection(self.params)
        if bad:
            raise ConfigError(f"Compact.params may not set {sorted(bad)}")
        sizes = sorted(_OUTPUT_SIZES.intersection(self.params))
        if sizes:
            # The transcript's room is sized for max_summary_tokens: another output size
            # in params would make the summary request overflow the window.
            raise ConfigError(
                f"Compact.params may not set {sizes}: the summary's output size is "
                f"Compact(max_summary_tokens=...) (now {self.max_summary_tokens}), which "
                "the transcript is sized for"
            )
        object.__setattr__(self, "params", dict(self.params))

    def split(self, view: OverflowView) -> int:
        """Where the kept units begin: ``messages[view.pinned:split]`` is summarised."""
        units = view.units()
        if not units:
            return view.pinned
        budget = int(view.limit * self.keep_fraction)
        est = view.estimator.message
        used = 0
        begin = units[-1][0]
        for kept, (b, e) in enumerate(reversed(units)):
            size = sum(est(m) for m in view.messages[b:e])
            if kept and (kept >= self.keep_last or used + size > budget):
                break
            used += size
            begin = b
        return begin

    def request(self, view: OverflowView, older: Sequence[Mapping[str, Any]]) -> ChatRequest:
        """The summary request for ``older`` (its transcript cut to fit the window)."""
        est = view.estimator
        tool_tokens = self.tool_output_tokens
        # Each message's text and its estimate, once; each rendering below tokenizes only
        # the heads it keeps of long tool results, and sums the transcript's estimate
        # from its pieces' (never the whole transcript, which may be ~1M tokens).
        parts = _parts(older, est)
        transcript, size = _render(parts, est, tool_tokens)
        room = self.max_input_tokens
        if room is None:
            # The summariser shares the session's window by default; 10% slack for the
            # estimate's error and the template.
            room = int((view.window - self.max_summary_tokens) * 0.9) - est.text(self.prompt)
            if room < 1:
                room = max(1, view.limit // 2)
        while size > room and tool_tokens > _MIN_TOOL_TOKENS:
            # Too long: cut tool results harder before losing whole messages.
            tool_tokens = max(_MIN_TOOL_TOKENS, tool_tokens // 2)
            transcript, size = _render(parts, est, tool_tokens)
        if size > room:
            # Still too long: keep the end, the most recent facts matter most.
            cut = size - room
            rest = transcript[len(est.cut(transcript, cut)) :]
            transcript = f"[… the first ~{cut:,} tokens of the transcript were cut …]\n{rest}"
        model = self.model or view.model
        if not model:
            raise ConfigError(
                f"Compact: session {view.session_id!r} has no known model to summarise with; "
                "set Compact(model=...) or ContextBudget(model=...)"
            )
        return ChatRequest(
            model=model,
            messages=[
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": transcript},
            ],
            params={**self.params, "max_tokens": self.max_summary_tokens},
        )

    async def __call__(self, view: OverflowView) -> bool:
        """Summarise the older units; return whether the history was compacted."""
        begin = self.split(view)
        if begin <= view.pinned:
            return False
        older = view.messages[view.pinned : begin]
        before = view.tokens()
        request = self.request(view, older)
        trace = await view.complete(request)
        summary = trace.content.strip()
        if not summary:
            return False
        message = {"role": self.role, "content": self.summary_prefix + summary}
        view.messages[view.pinned : begin] = [message]
        view.emit(
            CompactionEvent(
                agent=view.agent,
                session_id=view.session_id,
                turn=view.turn,
                messages_summarised=len(older),
                tokens_before=before,
                tokens_after=view.tokens(),
                summary_tokens=view.estimator.message(message),
                model=request.model,
                trace=trace,
            )
        )
        return True
