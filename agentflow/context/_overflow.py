"""Overflow policies: what a session does when its prompt would not fit its window.

Every policy has one signature::

    async def policy(view: OverflowView) -> bool

It may rewrite ``view.messages`` in place — never the pinned prefix
``view.messages[:view.pinned]``, and never splitting a tool call from its result
(see :func:`~agentflow.context.split_units`) — and returns whether it changed anything.
:class:`~agentflow.context.ContextBudget` runs its policies in order, re-estimating
after each, and stops at the first after which the prompt fits; if none makes it fit,
the session fails with :class:`~agentflow.ContextOverflow`. A policy that knows it
cannot help may raise :class:`~agentflow.ContextOverflow` itself (:class:`Fail` does).

Shipped: :class:`Fail`, :class:`DropOldest`, :class:`TruncateToolOutputs` and
:class:`~agentflow.context.Compact`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentflow._errors import ConfigError, ContextOverflow
from agentflow.context._history import split_units

if TYPE_CHECKING:
    from agentflow.typing import Complete

__all__ = [
    "DropOldest",
    "Fail",
    "OverflowPolicy",
    "OverflowView",
    "TokenEstimator",
    "TruncateToolOutputs",
    "overflow_error",
    "policy_name",
]


class TokenEstimator(Protocol):
    """Calibrated token estimates, as an :class:`OverflowView` offers them to policies."""

    def prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        """The whole prompt: messages, tool schemas and the template's overhead."""

    def message(self, message: Mapping[str, Any]) -> int:
        """One message, its template overhead included."""

    def text(self, text: str) -> int:
        """A bare text."""

    def cut(self, text: str, max_tokens: int) -> str:
        """The longest head of ``text`` whose estimate is at most ``max_tokens``."""


@dataclass(slots=True, kw_only=True)
class OverflowView:
    """What an overflow policy sees of the session whose prompt is too long.

    Attributes:
        session_id: the session.
        agent: its agent's name.
        model: the model the session talks to (and the default for summaries).
        turn: the turn about to be sent.
        messages: the session's own message list; policies edit it in place.
        pinned: the pinned prefix's length: ``messages[:pinned]`` must stay byte-identical.
        tools: the request's tool schemas (counted in the prompt; not to be changed).
        limit: the most prompt tokens allowed: window − output reserve − margin.
        window: the context window.
        complete: runs an extra model request for this session (a summary), through the
            same admission gate as its turns; its usage counts toward fleet budgets.
        estimator: calibrated token estimates (a message of the history: the session's
            own count of it, kept by the object — replace a message, never mutate it).
        emit: sends an event to the fleet's callbacks.
    """

    session_id: str
    agent: str
    model: str
    turn: int
    messages: list[dict[str, Any]]
    pinned: int
    tools: Sequence[Mapping[str, Any]]
    limit: int
    window: int
    complete: Complete
    estimator: TokenEstimator
    emit: Callable[[Any], None] = field(repr=False)

    def tokens(self) -> int:
        """The calibrated estimate of the prompt as the messages are now."""
        return self.estimator.prompt(self.messages, self.tools)

    def fits(self, target: float = 1.0) -> bool:
        """Whether the prompt is at most ``target × limit`` tokens."""
        return self.tokens() <= int(self.limit * target)

    def units(self) -> list[tuple[int, int]]:
        """The removable units after the pinned prefix, oldest first, as ``(begin, end)``."""
        return split_units(self.messages, self.pinned)


class OverflowPolicy(Protocol):
    """The one signature of an overflow policy; a plain ``async def`` satisfies it.

    Give it a ``name`` attribute to name it in events (else its ``__name__`` is used).
    """

    async def __call__(self, view: OverflowView) -> bool:
        """Try to shrink ``view.messages``; return whether anything changed."""


def policy_name(policy: object) -> str:
    """The name events use for ``policy``: its ``name``, else its ``__name__``, else its class."""
    name = getattr(policy, "name", None)
    if isinstance(name, str) and name:
        return name
    fn = getattr(policy, "__name__", None)
    return fn if isinstance(fn, str) else type(policy).__name__


def _check_fraction(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{owner}.{name} must be a number in (0, 1], got {value!r}")


def _check_count(owner: str, name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}.{name} must be an int ≥ {minimum}, got {value!r}")


def overflow_error(view: OverflowView, tokens: int | None = None) -> ContextOverflow:
    """The :class:`~agentflow.ContextOverflow` for ``view``: reserve and margin included."""
    prompt = view.tokens() if tokens is None else tokens
    needed = prompt + (view.window - view.limit)
    return ContextOverflow(
        f"session {view.session_id!r} (agent {view.agent!r}, turn {view.turn}): the prompt is "
        f"~{prompt:,} tokens; with the output reserve and safety margin it needs {needed:,} "
        f"tokens, more than the {view.window:,}-token window (prompts may use at most "
        f"{view.limit:,})",
        session_id=view.session_id,
        tokens=needed,
        limit=view.window,
    )


@dataclass(frozen=True, slots=True)
class Fail:
    """Ends the session with :class:`~agentflow.ContextOverflow` naming the tokens and the limit.

    The default policy, and the natural last link of a chain.
    """

    name: str = "fail"

    async def __call__(self, view: OverflowView) -> bool:
        """Raise: the prompt does not fit."""
        raise overflow_error(view)


@dataclass(frozen=True, slots=True, kw_only=True)
class DropOldest:
    """Drops the oldest units after the pinned prefix until the prompt fits.

    An assistant tool-call message and its results go together. Dropping rewrites the
    history right after the prefix, so the server's cache keeps only the prefix; to drop
    rarely rather than a little every turn, it drops down to ``target × limit``.

    Args:
        target: drop until the prompt is at most this fraction of the limit.
        keep_last: the most recent units that are never dropped (the live tool round).
    """

    target: float = 0.8
    keep_last: int = 1
    name: str = "drop_oldest"

    def __post_init__(self) -> None:
        _check_fraction("DropOldest", "target", self.target)
        _check_count("DropOldest", "keep_last", self.keep_last, 1)

    async def __call__(self, view: OverflowView) -> bool:
        """Drop the oldest units; return whether any was dropped."""
        goal = int(view.limit * self.target)
        est = view.estimator.message
        dropped = False
        # Each pass drops what the messages' own counts say is enough, then the whole
        # prompt is estimated again: a prompt costs more than its messages' sum (the
        # template, a calibration fitted per kind), so one pass can stop short of it.
        while (tokens := view.tokens()) > goal:
            units = view.units()
            droppable = units[: max(0, len(units) - self.keep_last)]
            end = view.pinned
            for begin, stop in droppable:
                if tokens <= goal:
                    break
                tokens -= sum(est(m) for m in view.messages[begin:stop])
                end = stop
            if end == view.pinned:
                break
            del view.messages[view.pinned : end]
            dropped = True
        return dropped


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateToolOutputs:
    """Cuts tool results longer than ``max_tokens`` to their first ``max_tokens`` tokens.

    A marker replaces what was cut and says how much (``[… 1,234 tokens of tool output
    cut …]``). A result is cut once and never touched again, so once cut it stays
    byte-identical on every later turn.

    **Every long result at once, by default.** When it runs, it cuts every long result
    but the newest ``keep_last``: one rewrite, after which the prompt is far inside the
    window and grows append-only — the server's prefix cache hits all of it — until
    the next overflow, whose first cut comes after everything cut before. Cutting only
    until the prompt fits (``all=False``) loses less output, but near the window a
    session then overflows again on nearly every turn, and each turn cuts an older
    result than the ones sent since: the cache misses from there on (on the simulator,
    15% of the prompt tokens cached after the first overflow, against 94% by default;
    ``tests/context/test_truncation_cache.py``, ``benchmarks/token_accounting.py``).

    **Cost.** A result's length comes from its message's count (the session's own, taken
    when it was appended), and only heads of it are tokenized to find the cut, so a cut
    costs O(``max_tokens``) whatever the output's size. With tiktoken one head is
    tokenized per result: the counts that confirm the cut, and the cut message's own
    count, reuse its tokens up to a space shortly before the cut
    (:meth:`~agentflow.context.TiktokenCounter.head_split`).

    Args:
        max_tokens: the most tokens a tool result keeps (the marker not counted).
        keep_last: the most recent tool results left whole (0: none is spared).
        all: cut every long result whenever it runs (default); ``False`` cuts oldest
            first, only until the prompt fits.
        marker: the text put where output was cut; ``{cut}`` becomes the token count.
    """

    max_tokens: int = 512
    keep_last: int = 0
    all: bool = True
    marker: str = "\n[… {cut:,} tokens of tool output cut …]"
    name: str = "truncate_tool_outputs"
    _cut_already: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _marker_room: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_count("TruncateToolOutputs", "max_tokens", self.max_tokens, 1)
        _check_count("TruncateToolOutputs", "keep_last", self.keep_last, 0)
        if "{cut" not in self.marker:
            raise ConfigError(
                f"TruncateToolOutputs.marker must contain '{{cut}}' (how much was cut), "
                f"got {self.marker!r}"
            )
        try:  # it is formatted at every cut: a bad field fails here, not mid-session
            self.marker.format(cut=1234)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"TruncateToolOutputs.marker {self.marker!r} cannot be formatted with only "
                f"{{cut}} (a number): {type(exc).__name__}: {exc}"
            ) from None
        head, _, rest = self.marker.partition("{cut")
        tail = rest.partition("}")[2]
        pattern = re.compile(re.escape(head) + r"[0-9,._ ]{1,40}" + re.escape(tail) + r"\Z")
        object.__setattr__(self, "_cut_already", pattern)
        # A marker is at most this long: only the end of an output is searched for one.
        object.__setattr__(self, "_marker_room", len(head) + 40 + len(tail))

    def was_cut(self, content: str) -> bool:
        """Whether ``content`` already ends with this policy's marker."""
        return (
            self._cut_already.search(content, max(0, len(content) - self._marker_room)) is not None
        )

    async def __call__(self, view: OverflowView) -> bool:
        """Cut long tool results; return whether any was cut."""
        est = view.estimator
        messages = view.messages
        indices = [
            i
            for i in range(view.pinned, len(messages))
            if messages[i].get("role") == "tool" and isinstance(messages[i].get("content"), str)
        ]
        if self.keep_last:
            indices = indices[: -self.keep_last]
        changed = False
        tokens = view.tokens() if not self.all else 0
        for i in indices:
            # The running figure subtracts what each cut saved; the budget's check
            # forecasts the rewritten prompt afresh (no longer anchored, so with the
            # whole prompt's margin): stop only when that fits too.
            if not self.all and tokens <= view.limit and (tokens := view.tokens()) <= view.limit:
                break
            msg = messages[i]
            content: str = msg["content"]
            before = est.message(msg)  # the session's own count, taken when it was appended
            if before <= self.max_tokens or self.was_cut(content):
                continue
            # The output's own tokens, without tokenizing it again: the message less
            # the same message with nothing in it (its call id is not counted, so one
            # such message stands for all and is counted once).
            n = before - est.message(
                {k: v for k, v in msg.items() if k != "tool_call_id"} | {"content": ""}
            )
            if n <= self.max_tokens:
                continue
            head = est.cut(content, self.max_tokens)
            cut = n - est.text(head)
            messages[i] = {**msg, "content": head + self.marker.format(cut=cut)}
            tokens -= before - est.message(messages[i])
            changed = True
        return changed
