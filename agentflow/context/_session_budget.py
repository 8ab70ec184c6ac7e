"""One session's side of a :class:`~agentflow.context.ContextBudget`: before each turn,
count the prompt, run the overflow policies if its bound is over the limit, check for
cache busters (the budget's own check, unless the agent's chain has a check link) and
fingerprint it; after each turn, teach the calibrator the server's count, fingerprint
the reply and report a bust. (A fleet budget is a link of its own in the agent's chain;
a check link after the budget asks it for the pinned prefix.)

The flow of one turn, in the order :meth:`SessionBudget.before_turn` runs it::

    raw      = PromptCounter.count(messages, tools)   # only what changed is counted
    forecast = Calibrator.forecast(model, shape)      # per content kind, anchored
    if forecast.bound > limit: policies, in order, until it fits (else ContextOverflow)
    CacheBusterCheck.check(...)                       # reported after the turn
    CacheableTracker.observe(...)                     # PromptInfo.max_cacheable_tokens
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentflow._context_chain import Binding, LinkSession
from agentflow._context_resumed import Resumed
from agentflow._errors import AgentflowError
from agentflow._trace import PromptInfo
from agentflow.context._cacheable import CacheableTracker
from agentflow.context._calibration import TokenEstimate
from agentflow.context._estimates import SessionEstimates
from agentflow.context._events import ContextTrimmedEvent
from agentflow.context._fingerprint import PrefixIndex
from agentflow.context._history import check_pairing, pinned_length, system_length
from agentflow.context._overflow import OverflowView, overflow_error, policy_name

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace
    from agentflow.context._budget import ContextBudget, PrefixSource
    from agentflow.typing import Complete

__all__ = ["SessionBudget"]


class SessionBudget(LinkSession):
    """One session's side of a :class:`ContextBudget` (its :class:`SessionContext`).

    Attributes:
        window: the window in tokens.
        reserve: tokens kept for the output.
        margin: tokens kept for estimation error.
        limit: ``window − reserve − margin``: the most prompt tokens allowed.
        last: what :meth:`before_turn` returned last.
        forecast: the calibrator's forecast of the prompt :meth:`before_turn` checked
            last: ``forecast.bound`` (its estimate plus the calibrated error margin) is
            what was compared with ``limit``; ``last.estimated_tokens`` is its
            ``tokens``.
    """

    def __init__(
        self,
        budget: ContextBudget,
        at: Binding,
        *,
        model: str | None,
        window: int,
        reserve: int,
        margin: int,
    ) -> None:
        super().__init__(at)
        self.budget = budget
        self.session_id = at.session_id
        self.agent = at.agent
        self.model = model
        self.window = window
        self.reserve = reserve
        self.margin = margin
        self.limit = window - reserve - margin
        self.last: PromptInfo | None = None
        self._emit = at.emit
        self._key = model or ""
        self._est = SessionEstimates(budget.counter, budget.calibrator, self._key)
        self._tracker: CacheableTracker | None = None
        if budget.prefix_index is not None:
            self.track_prefixes(budget.prefix_index)
        # The budget's own cache-buster check (its default one), run after the policies;
        # a check link in the agent's chain replaces it (see without_check).
        check = budget.cache_buster
        self._check = check.session_for(at) if check is not None else None
        if self._check is not None:
            self._check.join((self, self._check))  # it compares this budget's pinned prefix
        self._pinned: int | None = None
        self._system: int | None = None  # a resumed session's opening system messages
        self._served_model: str | None = None
        self.forecast: TokenEstimate | None = None

    def track_prefixes(self, index: PrefixSource) -> None:
        """Fingerprint this session's prompts in ``index`` (a prefix index link after the
        budget in a chain joins it through this), filling ``max_cacheable_tokens``."""
        self._tracker = CacheableTracker(
            # Following this session's own count: one change check per turn, and each
            # new message tokenized once for both (when the index renders as the
            # counter does).
            index.session(self._est.counter) if isinstance(index, PrefixIndex) else index.session(),
            self.budget.counter,
            getattr(index, "block_size", 16),
        )

    def without_check(self) -> None:
        """Run no cache-buster check of the budget's own: a check link of the chain does."""
        self._check = None

    def pinned_of(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """How many leading messages no policy may touch: the system message(s) and
        ``pin_first`` more (a cache-buster check after the budget compares them turn to
        turn)."""
        # Append-only until a policy first runs, so recomputing is safe until then; after,
        # the boundary is frozen (a system-role summary must not join the prefix). A
        # resumed session counts only the system messages it began with (``_system``):
        # a summary a policy put after them before the cut is not one of them either.
        if self._pinned is None:
            return pinned_length(messages, self.budget.pin_first, system=self._system)
        return self._pinned

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo:
        """Bring the prompt inside the window, and say what will be sent.

        Raises:
            ContextOverflow: no policy could make the prompt fit.
        """
        est = self._est
        raw = est.raw_prompt(messages, tools)
        forecast = est.forecast()  # calibrated per content kind, plus its error margin
        if forecast.bound > self.limit:
            raw, forecast = await self._overflow(turn, messages, tools, complete, forecast.bound)
        if self._check is not None:  # reported after the turn, with the loss the server shows
            await self._check.before_turn(turn, messages, tools, complete)
        cacheable = None
        if self._tracker is not None:
            # Fingerprints count local tokens; in the server's, like ``tokens``, so that
            # they compare with the cached_tokens it reports.
            cacheable = self._tracker.observe(messages, tools, tokens=forecast.tokens, raw=raw)
        self.forecast = forecast
        tokens = forecast.tokens
        self.last = PromptInfo(
            estimated_tokens=tokens, raw_estimate=raw, max_cacheable_tokens=cacheable
        )
        return self.last

    async def _overflow(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
        tokens: int,
    ) -> tuple[int, TokenEstimate]:
        pinned = self.pinned_of(messages)
        self._pinned = pinned
        view = OverflowView(
            session_id=self.session_id,
            agent=self.agent,
            model=self.model or self._served_model or "",
            turn=turn,
            messages=messages,
            pinned=pinned,
            tools=tools,
            limit=self.limit,
            window=self.window,
            complete=complete,
            estimator=self._est,
            emit=self._emit,
        )
        # A policy is blamed for broken pairing only if the pairing was whole before it
        # ran: a history the session was given unpaired is the server's to judge.
        paired = check_pairing(messages[pinned:]) is None
        for policy in self.budget.policies:
            prefix = messages[:pinned]
            count = len(messages)
            changed = await policy(view)
            if not changed:
                continue
            name = policy_name(policy)
            if messages[:pinned] != prefix:
                raise AgentflowError(f"overflow policy {name!r} changed the pinned prefix")
            problem = check_pairing(messages[pinned:])
            if problem is not None and paired:
                raise AgentflowError(f"overflow policy {name!r} broke tool-call pairing: {problem}")
            paired = problem is None
            raw = self._est.raw_prompt(messages, tools)
            forecast = self._est.forecast()
            after = forecast.bound
            self._emit(
                ContextTrimmedEvent(
                    agent=self.agent,
                    session_id=self.session_id,
                    turn=turn,
                    policy=name,
                    tokens_before=tokens,
                    tokens_after=after,
                    limit=self.limit,
                    messages_before=count,
                    messages_after=len(messages),
                )
            )
            tokens = after
            if tokens <= self.limit:
                return raw, forecast
        raise overflow_error(view, tokens)

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Feed the reported prompt size to the calibrator; fingerprint the reply, which
        the server cached with the prompt; report the turn's cache bust, if any, with the
        loss the server's usage shows."""
        if trace.model:
            self._served_model = trace.model
        usage = trace.usage
        last = self.last
        if usage is not None and usage.prompt_tokens is not None and last is not None:
            # Teaches the calibrator (per kind, and the margin's errors) and anchors the
            # next turn's estimate on the server's count of this prompt — before the
            # reply is fingerprinted below, which counts the prompt *and the reply* with
            # the same counter: the anchor is the prompt as sent.
            self._est.observe(usage.prompt_tokens, self.forecast)
        if self._tracker is not None:
            self._tracker.reply(trace)  # the server cached its reply with the prompt
        if self._check is not None:
            self._check.after_turn(turn, trace)

    def resume(self, resumed: Resumed) -> None:
        """The session resumes a recorded conversation: pin the system messages it began
        with (not a system-role summary a policy put after them), and anchor the next
        forecast on the server's count of the last recorded prompt, as the uninterrupted
        session's is (else the first forecast would carry the whole prompt's error
        margin)."""
        self._system = system_length(resumed.opening)
        if resumed.trace.model:
            self._served_model = resumed.trace.model
        usage = resumed.trace.usage
        if usage is not None and usage.prompt_tokens:
            self._est.raw_prompt(resumed.prompt, resumed.tools)
            self._est.anchor(usage.prompt_tokens)

    def end(self) -> None:
        """The session ended: the budget's own cache-buster check reports a bust the last
        turn did not measure, and forgets the session."""
        if self._check is not None:
            self._check.end()
