"""Where a resumed session's conversation stands, for its context links: the
``resume`` hook of :mod:`agentflow._context_chain`.

A session resumed from a run store (``agentflow.store``) is rebuilt from its recorded
turns; its context is bound afresh, and told once, before its first turn, what its links
would have learnt live — the last recorded prompt and the server's count of it, the
messages the session began with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentflow._trace import PromptInfo, TurnTrace

__all__ = ["Resumed", "resume_session"]


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a conversation a run store recorded stands, for a resumed session's context
    (its ``resume`` hook, called once it is bound, before its first turn).

    Attributes:
        opening: the messages the session started with — its agent's system prompt,
            then its task — whatever policies did to the history after.
        turn: the last recorded turn's number.
        prompt: that turn's prompt, as it was sent (the messages before its reply).
        tools: the tool schemas sent with it.
        trace: that turn's trace (``usage.prompt_tokens``: the server's count of
            ``prompt``).
        info: what the context said of that prompt then, if anything.
    """

    opening: Sequence[Mapping[str, Any]] = field(repr=False)
    turn: int
    prompt: Sequence[Mapping[str, Any]] = field(repr=False)
    tools: Sequence[Mapping[str, Any]] = field(repr=False)
    trace: TurnTrace = field(repr=False)
    info: PromptInfo | None = None


def resume_session(context: object, resumed: Resumed) -> None:
    """``context.resume(resumed)`` if it has one: the session resumes a recorded
    conversation."""
    resume = getattr(context, "resume", None)
    if callable(resume):
        resume(resumed)
