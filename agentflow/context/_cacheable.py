"""A session's cacheable maximum in the server's tokens, replies included.

A :class:`~agentflow.context.PrefixSession` (any :class:`PrefixTracker`) counts the
leading blocks of a prompt that were sent before, in the local tokenizer's tokens.
Two things turn that into the figure reports set against the server's
``cached_tokens``:

**The reply was "sent" too.** A server caches the tokens it generates as well as the
prompt's (vLLM keeps every full block of a request, output included), and the next
prompt repeats the reply: the session appends it as the assistant message. So after
each turn the prompt *followed by the reply* is recorded as sent — and the next turn's
maximum reaches through the reply. Without it the maximum stopped at the previous
prompt's end, and efficiency came out above 100%, the more so the longer the replies.
A reply that began with reasoning is not recorded: the next prompt leaves the reasoning
out, so it does not repeat what the server generated.

**Server tokens, anchored on the server's counts.** Scaling the local figure by the
whole prompt's calibrated ratio is off wherever the prefix is another kind of text than
the rest (tool schemas, code). But what a session's next prompt can reuse is, almost
always, its previous prompt and reply — whose length in the server's tokens the server
reported (``prompt_tokens + completion_tokens``). So when the local maximum covers that
whole sequence (all but its unfinished block), the maximum is the sequence's length as
the server counted it — an upper bound by less than one of the server's blocks, which
draws its block boundaries on its own tokens; when it covers part of it, the part is
scaled by the sequence's own server/local ratio; only what lies beyond it (a prefix
another session sent) is scaled by the calibrated whole-prompt ratio — as is a session's
first turn, before the server has counted anything of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace
    from agentflow.context._budget import PrefixTracker
    from agentflow.context._messages import MessageCounter

__all__ = ["CacheableTracker"]


class CacheableTracker:
    """One session's cacheable maximum, in the server's tokens (see the module).

    Args:
        tracker: the session's prefix tracker.
        counter: counts the reply, as the budget's estimates are counted.
        block_size: the tracker's tokens per block.
    """

    __slots__ = ("_block", "_counter", "_raw", "_sent", "_seq", "_tracker")

    def __init__(self, tracker: PrefixTracker, counter: MessageCounter, block_size: int) -> None:
        self._tracker = tracker
        self._counter = counter
        self._block = block_size
        #: The prompt last observed: the session's message list, how many of its
        #: messages were sent, the tools.
        self._sent: tuple[list[dict[str, Any]], int, Sequence[Mapping[str, Any]]] | None = None
        self._raw = 0
        #: The previous prompt and reply: (local tokens, the server's tokens).
        self._seq: tuple[int, int] | None = None

    def observe(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        tokens: int,
        raw: int,
    ) -> int:
        """Fingerprint the prompt about to be sent; its cacheable maximum in server tokens.

        Args:
            messages: the session's messages, as they will be sent.
            tools: the tool schemas.
            tokens: the prompt's calibrated estimate (server tokens).
            raw: its local count.
        """
        local = self._tracker.observe(messages, tools)
        self._sent = (messages, len(messages), tools)
        self._raw = raw
        ratio = tokens / raw if raw > 0 else 1.0
        seq = self._seq
        if seq is None:
            return round(local * ratio)
        local_seq, server_seq = seq
        if local <= local_seq - self._block:
            return round(local * server_seq / local_seq)
        if local <= local_seq:
            return server_seq
        return server_seq + round((local - local_seq) * ratio)

    def reply(self, trace: TurnTrace) -> None:
        """Record the prompt last observed followed by the turn's reply as sent, and the
        server's count of the two."""
        sent, self._sent = self._sent, None
        self._seq = None
        if sent is None or trace.reasoning:
            return
        messages, n, tools = sent
        reply = trace.assistant_message()
        self._tracker.observe([*messages[:n], reply], tools)
        usage = trace.usage
        if usage is None or not usage.prompt_tokens or usage.completion_tokens is None:
            return
        counter = self._counter
        local = self._raw - counter.reply_priming + counter.count_message(reply)
        if local > 0:
            self._seq = (local, usage.prompt_tokens + usage.completion_tokens)
