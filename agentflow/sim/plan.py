"""What a request's output is, decided whole when the request is added
(:mod:`agentflow.sim.textgen` makes it): an :class:`OutputPlan` — its tokens, their
text, its tool calls — and the OpenAI streaming delta of any run of its tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FinishReason", "OutputDelta", "OutputPlan", "PlannedToolCall", "ToolCallDelta"]

#: How a request ended: as planned, cut by a limit, or cancelled.
FinishReason = Literal["stop", "tool_calls", "length", "abort"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedToolCall:
    """One tool call the model will make."""

    id: str
    name: str
    #: The arguments' JSON text, exactly as streamed.
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """The part of one tool call that a run of tokens carries."""

    index: int
    #: Set on the call's first delta only.
    id: str | None
    #: Set on the call's first delta only.
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputDelta:
    """What a run of output tokens says, in OpenAI streaming terms."""

    content: str
    tool_calls: tuple[ToolCallDelta, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputPlan:
    """A request's whole output, token by token.

    Attributes:
        token_ids: every token the model would emit, the end token (``<|im_end|>``)
            last; the engine may stop earlier.
        text: the assistant message body these tokens spell (content, then the tool
            calls as :func:`~agentflow.sim.tokenizer.render_tool_call` text).
        offsets: ``offsets[i]`` is where token *i* starts in ``text``;
            ``offsets[len(token_ids)] == len(text)``. The end token is zero-width.
        content: the message content (empty for a bare tool-calling turn).
        tool_calls: the calls, in order (empty for a text answer).
        finish_reason: the finish reason if every token is emitted.
    """

    token_ids: tuple[int, ...]
    text: str
    offsets: tuple[int, ...]
    content: str
    tool_calls: tuple[PlannedToolCall, ...] = ()
    finish_reason: Literal["stop", "tool_calls"] = "stop"
    #: For each call: (start of its text, start of its arguments, end of its arguments).
    call_spans: tuple[tuple[int, int, int], ...] = field(default=(), repr=False)

    def __len__(self) -> int:
        return len(self.token_ids)

    def text_of(self, start: int, end: int) -> str:
        """The raw text of tokens ``[start, end)``."""
        return self.text[self.offsets[start] : self.offsets[end]]

    def delta(self, start: int, end: int) -> OutputDelta:
        """Tokens ``[start, end)`` as an OpenAI delta: content text and tool-call pieces.

        A tool call's name (and id) goes out with the first run that reaches its text;
        its arguments stream as their characters are covered.
        """
        c0, c1 = self.offsets[start], self.offsets[end]
        if not self.tool_calls:
            return OutputDelta(content=self.text[c0:c1])
        content_end = len(self.content)
        content = self.text[c0 : min(c1, content_end)] if c0 < content_end else ""
        deltas: list[ToolCallDelta] = []
        for i, (call, (s0, a0, a1)) in enumerate(
            zip(self.tool_calls, self.call_spans, strict=True)
        ):
            if c1 <= s0:
                break
            first = c0 <= s0
            args = self.text[max(c0, a0) : min(c1, a1)] if c1 > a0 and c0 < a1 else ""
            if first or args:
                deltas.append(
                    ToolCallDelta(
                        index=i,
                        id=call.id if first else None,
                        name=call.name if first else None,
                        arguments=args,
                    )
                )
        return OutputDelta(content=content, tool_calls=tuple(deltas))
