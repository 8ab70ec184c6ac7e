"""Fleet-wide budgets: total tokens and total cost over every session that shares one.

A :class:`FleetBudget` counts what servers reported (``usage``) for every turn and every
extra request (compaction summaries) of the sessions whose context policy shares it.
Once a budget is spent, the next turn of any of them does not start: its
``before_turn`` raises :class:`~agentflow.BudgetExceeded` and the session ends with
status ``error`` and that error. Turns already in flight finish, so the final spend may
pass the budget by what they used.

Cost of one request, with prices per million tokens::

    cost = ((prompt − cached) × prompt_price + cached × cached_price
            + output × output_price) / 1e6

It is a link of an agent's context: on its own (``Agent(context=FleetBudget(...))``) when
sessions need a budget but no window, or in a chain,
``Agent(context=[FleetBudget(...), ContextBudget(...)])``. It checks the budget before
each turn and before each extra request of the links after it (a compaction's summary),
and charges both; in a chain with a :class:`~agentflow.context.ContextBudget` a turn the
server sent no usage for is charged with the budget's estimate of its prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from agentflow._context_chain import Binding, Link, LinkSession
from agentflow._counts import check_count
from agentflow._errors import BudgetExceeded, ConfigError
from agentflow.context._events import BudgetEvent

if TYPE_CHECKING:
    from agentflow._request import ChatRequest
    from agentflow._trace import PromptInfo, TurnTrace
    from agentflow.context._session_budget import SessionBudget
    from agentflow.typing import Complete

__all__ = ["FleetBudget", "Prices", "Spend"]


def _check_price(owner: str, name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(f"{owner}.{name} must be a finite number ≥ 0, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """What a model's tokens cost, per million tokens, in any one currency.

    Args:
        prompt: uncached prompt tokens.
        output: output (completion) tokens, reasoning included.
        cached: prompt tokens served from the server's cache; ``None``: the prompt price.
    """

    prompt: float
    output: float
    cached: float | None = None

    def __post_init__(self) -> None:
        for name in ("prompt", "output", "cached"):
            _check_price("Prices", name, getattr(self, name))

    def cost(self, prompt: int, cached: int, output: int) -> float:
        """The cost of one request with these token counts."""
        cached = min(cached, prompt)
        cached_price = self.prompt if self.cached is None else self.cached
        return (
            (prompt - cached) * self.prompt + cached * cached_price + output * self.output
        ) / 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class Spend:
    """What one request used, as counted against a fleet budget."""

    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float

    @property
    def tokens(self) -> int:
        """Prompt and output tokens together."""
        return self.prompt_tokens + self.output_tokens


def spend_of(trace: TurnTrace, prices: Prices | None, *, prompt_estimate: int = 0) -> Spend:
    """What ``trace`` used: the server's usage, else the estimate and the counted chunks."""
    usage = trace.usage
    prompt = usage.prompt_tokens if usage and usage.prompt_tokens is not None else None
    output = usage.completion_tokens if usage and usage.completion_tokens is not None else None
    cached = usage.cached_tokens if usage and usage.cached_tokens is not None else 0
    if prompt is None:
        prompt = prompt_estimate
    if output is None:
        output = sum(trace.chunk_tokens)
    cost = prices.cost(prompt, cached, output) if prices is not None else 0.0
    return Spend(prompt_tokens=prompt, cached_tokens=cached, output_tokens=output, cost=cost)


class FleetBudget(Link["_FleetSession"]):
    """Total token and cost budgets shared by every session that uses it.

    Args:
        max_tokens: prompt + output tokens over all requests; ``None``: no token budget.
        max_cost: total cost in the prices' currency; needs ``prices``.
        prices: one :class:`Prices` for every model, or a mapping from model name to
            prices (a session whose model, or whose compaction's summary model, is missing
            from it fails with a :class:`ConfigError` when it binds, before any request).
        warn_at: fractions of each budget at which a :class:`BudgetEvent` is emitted
            (one more is emitted, with ``exceeded=True``, when a budget is spent).
    """

    def __init__(
        self,
        *,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        prices: Prices | Mapping[str, Prices] | None = None,
        warn_at: Sequence[float] = (0.5, 0.8, 0.9),
    ) -> None:
        check_count(max_tokens, "FleetBudget.max_tokens", none="no token budget")
        if max_cost is not None:
            _check_price("FleetBudget", "max_cost", max_cost)
            if prices is None:
                raise ConfigError("FleetBudget.max_cost needs prices (FleetBudget.prices is None)")
        if prices is not None and not isinstance(prices, Prices):
            if not isinstance(prices, Mapping):
                raise ConfigError(
                    f"FleetBudget.prices must be a Prices, a mapping of model names to "
                    f"Prices, or None, got {prices!r}"
                )
            for model, p in prices.items():
                if not isinstance(model, str):
                    raise ConfigError(f"FleetBudget.prices keys must be model names, got {model!r}")
                if not isinstance(p, Prices):
                    raise ConfigError(f"FleetBudget.prices[{model!r}] must be a Prices, got {p!r}")
        if isinstance(warn_at, str | bytes | Mapping) or not isinstance(warn_at, Iterable):
            raise ConfigError(
                f"FleetBudget.warn_at must be a sequence of fractions in (0, 1), got {warn_at!r}"
            )
        warn_at = tuple(warn_at)
        for f in warn_at:
            if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f < 1:
                raise ConfigError(f"FleetBudget.warn_at values must be in (0, 1), got {f!r}")
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.prices = prices
        self.warn_at = tuple(sorted(set(warn_at)))
        #: Prompt + output tokens counted so far.
        self.tokens = 0
        #: Cost counted so far (0 without prices).
        self.cost = 0.0
        #: Requests counted so far.
        self.requests = 0
        self._crossed: dict[str, int] = {"tokens": 0, "cost": 0}
        #: The attempts at recorded runs, ``(run_id, created_wall_ns, attempt)``, whose
        #: turns it counted: as they ran in this process, or charged by a resume of the
        #: attempt once it had ended (``store/_budgets.py``). A resume in this process
        #: does not charge their turns again. The run's creation time tells apart two
        #: runs of one id (in two stores, say).
        self.counted_attempts: set[tuple[str, int | None, int]] = set()
        #: Of attempts not ended when a resume charged them (killed, or still running in
        #: another worker), by ``(run_id, created_wall_ns, attempt)``, the last turn
        #: charged per session (a session's turns are recorded in order): a later resume
        #: charges only the turns recorded since; dropped once the attempt has ended.
        self.counted_turns: dict[tuple[str, int | None, int], dict[str, int]] = {}

    def prices_for(self, model: str | None) -> Prices | None:
        """The prices of ``model``, or ``None`` when no prices were given."""
        if self.prices is None or isinstance(self.prices, Prices):
            return self.prices
        if model is not None and model in self.prices:
            return self.prices[model]
        raise ConfigError(
            f"FleetBudget.prices has no entry for model {model!r} (it has {sorted(self.prices)})"
        )

    @property
    def exceeded(self) -> BudgetExceeded | None:
        """The error for a spent budget, or ``None`` while both last."""
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return BudgetExceeded(
                f"the fleet's token budget is spent: {self.tokens:,} of {self.max_tokens:,} tokens",
                budget="tokens",
                spent=self.tokens,
                limit=self.max_tokens,
            )
        if self.max_cost is not None and self.cost >= self.max_cost:
            return BudgetExceeded(
                f"the fleet's cost budget is spent: {self.cost:.6g} of {self.max_cost:.6g}",
                budget="cost",
                spent=self.cost,
                limit=self.max_cost,
            )
        return None

    def check(self) -> None:
        """Raise :class:`~agentflow.BudgetExceeded` if a budget is spent."""
        error = self.exceeded
        if error is not None:
            raise error

    def record(self, spend: Spend) -> list[tuple[Literal["tokens", "cost"], float, bool]]:
        """Count ``spend``; return the thresholds it crossed as ``(budget, fraction, exceeded)``."""
        self.tokens += spend.tokens
        self.cost += spend.cost
        self.requests += 1
        crossed: list[tuple[Literal["tokens", "cost"], float, bool]] = []
        budgets: tuple[tuple[Literal["tokens", "cost"], float, float | None], ...] = (
            ("tokens", self.tokens, self.max_tokens),
            ("cost", self.cost, self.max_cost),
        )
        for budget, spent, limit in budgets:
            if limit is None:
                continue
            marks = (*self.warn_at, 1.0)
            done = self._crossed[budget]
            while done < len(marks) and spent >= marks[done] * limit:
                crossed.append((budget, marks[done], marks[done] >= 1.0))
                done += 1
            self._crossed[budget] = done
        return crossed

    def charge(
        self,
        trace: TurnTrace,
        *,
        model: str | None,
        agent: str,
        session_id: str,
        turn: int,
        emit: Callable[[Any], None],
        prompt_estimate: int = 0,
    ) -> Spend:
        """Count one request's usage and emit a :class:`BudgetEvent` per threshold crossed."""
        spend = spend_of(
            trace, self.prices_for(model or trace.model), prompt_estimate=prompt_estimate
        )
        for budget, fraction, exceeded in self.record(spend):
            limit = self.max_tokens if budget == "tokens" else self.max_cost
            emit(
                BudgetEvent(
                    agent=agent,
                    session_id=session_id,
                    turn=turn,
                    budget=budget,
                    spent=self.tokens if budget == "tokens" else self.cost,
                    limit=float(limit or 0),
                    fraction=fraction,
                    exceeded=exceeded,
                )
            )
        return spend

    def priced(self, model: str | None, used_by: str) -> None:
        """Refuse, before any request, a model the per-model prices do not have (else its
        requests would be served, then fail their session uncharged); ``used_by`` says
        what uses it. Nothing to check without prices, one for every model, or a model
        not known yet (``None`` or empty: the server's reported one prices it).

        Raises:
            ConfigError: ``prices`` is a mapping without ``model``.
        """
        prices = self.prices
        if not model or prices is None or isinstance(prices, Prices) or model in prices:
            return
        raise ConfigError(
            f"FleetBudget.prices has no entry for model {model!r}, {used_by} (it has "
            f"{sorted(prices)}); add its Prices, or give one Prices for every model"
        )

    def session_for(self, at: Binding) -> _FleetSession:
        """A per-session context that checks and charges this budget (``at.model`` picks
        the prices from a per-model mapping; the server's model when it is ``None``).

        Raises:
            ConfigError: the per-model prices have no entry for ``at.model``: the session
                fails before it sends anything.
        """
        self.priced(at.model, f"the model of session {at.session_id!r}")
        return _FleetSession(at, self)


class _FleetSession(LinkSession):
    """One session's side of a :class:`FleetBudget` (a link of its context chain)."""

    __slots__ = ("_budget", "_prompts", "_sent")

    def __init__(self, at: Binding, budget: FleetBudget) -> None:
        super().__init__(at)
        self._budget = budget
        #: The budget session whose estimate charges a turn the server sent no usage for.
        self._prompts: SessionBudget | None = None
        #: Without one, the turn's prompt as sent: (messages, how many, tool schemas),
        #: roughly counted only if the server sends no usage.
        self._sent: tuple[list[dict[str, Any]], int, Sequence[Mapping[str, Any]]] | None = None

    def join(self, sessions: Sequence[object]) -> None:
        """Charge a turn without usage with the estimate of a budget in the chain; refuse
        a summary model of its :class:`~agentflow.context.Compact` policies that the
        per-model prices do not have, before any request.

        Raises:
            ConfigError: a summary model without prices.
        """
        from agentflow.context._compact import Compact
        from agentflow.context._session_budget import SessionBudget

        for session in sessions:
            if isinstance(session, SessionBudget):
                for policy in session.budget.policies:
                    if isinstance(policy, Compact):
                        used_by = f"the summary model of session {session.session_id!r}'s Compact"
                        self._budget.priced(policy.model or session.model, used_by)
                if self._prompts is None:
                    self._prompts = session

    def wrap_complete(self, turn: int, complete: Complete) -> Complete:
        """``complete``, checking the budget before each extra request and charging it."""
        budget = self._budget

        async def charged(request: ChatRequest) -> TurnTrace:
            budget.check()
            budget.priced(request.model, f"an extra request of session {self.at.session_id!r}")
            trace = await complete(request)
            self._charge(trace, turn, request.model)
            return trace

        return charged

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Raise :class:`~agentflow.BudgetExceeded` if the budget is spent."""
        self._budget.check()
        if self._prompts is None:
            self._sent = (messages, len(messages), tools)
        return None

    def before_send(self, turn: int) -> None:
        """Check again once the links after this one are done: others' turns, or this
        session's compaction, may have spent the budget meanwhile."""
        self._budget.check()

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Count the turn's usage; without the server's, the prompt's estimate: a budget's
        in the chain, else a rough count (4 characters a token) of what was sent."""
        estimate = 0
        if self._prompts is not None:
            last = self._prompts.last
            estimate = last.estimated_tokens if last else 0
        elif self._sent is not None and (trace.usage is None or not trace.usage.prompt_tokens):
            from agentflow._session_turn import _rough_tokens  # (rarely: no usage sent)

            messages, n, tools = self._sent
            tool_chars = len(msgspec.json.encode(list(tools))) if tools else 0
            estimate = _rough_tokens(messages[:n], tool_chars)
        self._sent = None
        self._charge(trace, turn, self.at.model, estimate)

    def _charge(self, trace: TurnTrace, turn: int, model: str | None, estimate: int = 0) -> None:
        at = self.at
        self._budget.charge(
            trace,
            model=model,
            agent=at.agent,
            session_id=at.session_id,
            turn=turn,
            emit=at.emit,
            prompt_estimate=estimate,
        )
