"""A :class:`~agentflow.context.CacheBusterCheck` as a link of an agent's context chain:
one session's side of it (:meth:`CacheBusterCheck.session_for` makes it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentflow._context_chain import Binding, LinkSession

if TYPE_CHECKING:
    from agentflow._trace import PromptInfo, TurnTrace
    from agentflow.context._cachebuster import CacheBusterCheck
    from agentflow.typing import Complete

__all__ = ["CheckContext"]


class CheckContext(LinkSession):
    """The per-session context of a :class:`CacheBusterCheck` (a link of the chain)."""

    __slots__ = ("_check", "_pinned")

    def __init__(self, at: Binding, check: CacheBusterCheck) -> None:
        super().__init__(at)
        self._check = check
        self._pinned: Callable[[Sequence[Mapping[str, Any]]], int] | None = None

    def join(self, sessions: Sequence[object]) -> None:
        """Compare the pinned prefix of the nearest budget before this check, turn to turn;
        the chain's budgets run no default check of their own beside this one."""
        from agentflow.context._session_budget import SessionBudget

        budgets = [s for s in self.earlier(sessions) if isinstance(s, SessionBudget)]
        if budgets:
            self._pinned = budgets[0].pinned_of
        for session in sessions:
            if (
                isinstance(session, SessionBudget)
                and session.budget.cache_buster is not self._check
            ):
                session.without_check()

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Run the check on the prompt about to be sent; nothing is rewritten."""
        pinned, at = self._pinned, self.at
        self._check.check(
            at.session_id,
            at.agent,
            messages,
            tools,
            at.emit,
            turn=turn,
            pinned=pinned(messages) if pinned is not None else None,
            defer=True,  # reported after the turn, with the loss the server shows
        )
        return None

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Report the turn's bust, if any, with the loss the server's usage shows."""
        self._check.observe_turn(self.at.session_id, trace)

    def end(self) -> None:
        """The session ended: a bust its last turn did not measure (it failed) is reported
        with its estimate, and the session is forgotten."""
        self._check.forget(self.at.session_id)
