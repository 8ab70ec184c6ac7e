"""The context seam as a chain: ``Agent(context=[link, link, …])``.

Every link has the one signature of :class:`agentflow.typing.ContextLink`: ``bind(...)``
gives a per-session :class:`~agentflow.typing.SessionContext`. A chain binds each link
per session and runs them like nested context managers (or structlog's processors, or
the overflow policies): ``before_turn`` in the links' order — each may rewrite the
messages and say what it knows of the prompt — and ``after_turn`` in reverse, so that the
first link is the outermost: a :class:`~agentflow.context.FleetBudget` placed first
refuses a turn before any other link works on it, and is charged last.

Five optional hooks let links that belong together find each other, without another
signature for users to implement:

- ``wrap_complete(turn, complete) -> complete`` on a session context: every link's extra
  model requests (a compaction's summary) go through it — a fleet budget checks and
  charges them, wherever it stands in the chain.
- ``before_send(turn)`` on a session context: called once every link's ``before_turn``
  has run, in the links' order — the last word before the request goes out (a fleet
  budget checks again: a compaction's summary may have spent it).
- ``end()`` on a session context: called once when the session ends, however it ends
  (the last link's first) — a cache-buster check reports a bust its failed last turn
  could not measure, and forgets the session.
- ``join(sessions)`` on a session context: called once, after binding, with the sessions
  of every link of the chain, in order — a cache-buster check learns the budget's pinned
  prefix, a prefix index fingerprints with the budget's counts, a fleet budget charges a
  turn the server sent no usage for with the budget's estimate.
- ``resume(resumed)`` on a session context: called once, after ``join``, when the session
  resumes a conversation a run store recorded, with a
  :class:`~agentflow._context_resumed.Resumed` (the last
  recorded prompt and its usage, the messages the session started with) — a budget
  anchors its next forecast on the server's count, as the uninterrupted session's is.

And one on a link, ``chain_links(chain) -> links``: what it stands for in the chain it is
given in (a :class:`~agentflow.context.ContextBudget` puts the fleet budget its deprecated
``fleet=`` names before itself; it raises :class:`~agentflow.ConfigError` where the chain
sets the same thing another way).

This module is below :mod:`agentflow.context`: the agent and the session use it without
importing the context package (a user's own policy costs no tokenizer import).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from agentflow._context_resumed import Resumed, resume_session
from agentflow._errors import ConfigError
from agentflow._logging import get_logger

if TYPE_CHECKING:
    from agentflow._events import Event
    from agentflow._trace import PromptInfo, TurnTrace
    from agentflow.context import FleetBudget
    from agentflow.typing import Complete, ContextLink, SessionContext

__all__ = ["Binding", "ContextChain", "Link", "LinkSession", "bind_context", "end_session"]

_log = get_logger("agentflow.context")


@dataclass(frozen=True, slots=True)
class Binding:
    """What :meth:`~agentflow.typing.ContextLink.bind` was given for one session.

    Attributes:
        session_id: the session.
        agent: its agent's name.
        emit: sends events to the fleet's callbacks.
        model: the agent's model (``None`` when bound without one).
        params: the agent's body params (``max_tokens`` sizes an output reserve).
    """

    session_id: str
    agent: str
    emit: Callable[[Any], None] = field(repr=False)
    model: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict, repr=False)


_S = TypeVar("_S", covariant=True)


class Link(Generic[_S]):
    """The shipped links' one ``bind``: it packs its arguments into a :class:`Binding`
    and hands it to the link's :meth:`session_for`."""

    __slots__ = ()

    def bind(
        self,
        *,
        session_id: str,
        agent: str,
        emit: Callable[[Event], None],
        model: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> _S:
        """A fresh per-session context (see :meth:`agentflow.typing.ContextLink.bind`)."""
        return self.session_for(Binding(session_id, agent, emit, model, params or {}))

    def session_for(self, at: Binding) -> _S:
        """The per-session context for the session ``at`` describes."""
        raise NotImplementedError


class LinkSession:
    """A link's per-session context that does nothing: subclasses override what they do.

    Attributes:
        at: the session it was bound for.
    """

    __slots__ = ("at",)

    def __init__(self, at: Binding) -> None:
        self.at = at

    def earlier(self, sessions: Sequence[object]) -> Sequence[object]:
        """The sessions of the links before this one's in ``sessions``, nearest first."""
        i = next(i for i, s in enumerate(sessions) if s is self)
        return sessions[:i][::-1]

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Nothing is rewritten, nothing said of the prompt."""
        return None

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Nothing is learnt from the turn."""


class ContextChain(Link["SessionContext"]):
    """Context links run in order before each turn, in reverse after it.

    ``Agent(context=[a, b, c])`` builds one; build it yourself to share one chain between
    agents. A :class:`~agentflow.context.PrefixIndex` (any ``PrefixSource``) is a link
    too: it fingerprints each prompt with the counts of the
    :class:`~agentflow.context.ContextBudget` before it.

    Args:
        links: the links, in the order their ``before_turn`` runs.

    Raises:
        ConfigError: an item is not a link, one link is given twice, or two links set the
            same thing (e.g. a :class:`~agentflow.context.FleetBudget` link and
            ``ContextBudget(fleet=)``).

    Attributes:
        given: the links as given.
        links: the links the chain runs: ``given``, with what each stands for expanded
            (the fleet budget of a deprecated ``ContextBudget(fleet=)``, for one).
    """

    __slots__ = ("given", "links")

    def __init__(self, links: Iterable[Any]) -> None:
        given = tuple(links)
        for i, link in enumerate(given):
            if isinstance(link, ContextChain):
                raise ConfigError(f"context[{i}] is a ContextChain; list its links instead")
            if not callable(getattr(link, "bind", None)) and not is_prefix_source(link):
                raise ConfigError(
                    f"context[{i}]: {link!r} is not a context link (it has no bind())"
                )
        _no_repeats(given)
        expanded: list[Any] = []
        for link in given:
            hook = getattr(link, "chain_links", None)
            found = tuple(hook(given)) if callable(hook) else (link,)
            expanded.extend(_PrefixLink(x) if is_prefix_source(x) else x for x in found)
        _no_repeats(expanded)
        for i, x in enumerate(expanded):
            if isinstance(x, _PrefixLink) and not any(
                hasattr(e, "prefix_index") for e in expanded[:i]
            ):
                raise ConfigError(
                    f"the prefix index {x.index!r} needs a ContextBudget before it in the "
                    f"chain (it fingerprints with the budget's token counts): "
                    f"Agent(context=[ContextBudget(...), PrefixIndex()])"
                )
        self.given: tuple[ContextLink, ...] = given
        self.links: tuple[ContextLink, ...] = tuple(expanded)

    @classmethod
    def of(cls, context: ContextLink | Sequence[ContextLink]) -> ContextChain:
        """``context`` as a chain (a chain is returned as it is)."""
        if isinstance(context, ContextChain):
            return context
        if isinstance(context, list | tuple):
            return cls(cast("Sequence[ContextLink]", context))
        return cls((cast("ContextLink", context),))

    @property
    def fleet(self) -> FleetBudget | None:
        """The first :class:`~agentflow.context.FleetBudget` of the chain, if any."""
        fleets = self.fleets
        return fleets[0] if fleets else None

    @property
    def fleets(self) -> tuple[FleetBudget, ...]:
        """Every :class:`~agentflow.context.FleetBudget` of the chain, in order (each
        turn is charged to all of them; a resumed run charges each with what the run
        spent)."""
        from agentflow.context._fleet_budget import FleetBudget

        return tuple(x for x in self.links if isinstance(x, FleetBudget))

    def session_for(self, at: Binding) -> SessionContext:
        """Bind every link for one session; one link's session is returned as it is."""
        sessions = [
            link.bind(
                session_id=at.session_id,
                agent=at.agent,
                emit=at.emit,
                model=at.model or "",
                params=at.params,
            )
            for link in self.links
        ]
        joined = tuple(sessions)
        for session in joined:
            join = getattr(session, "join", None)
            if callable(join):
                join(joined)
        return sessions[0] if len(sessions) == 1 else _ChainContext(sessions)

    def __repr__(self) -> str:
        return f"ContextChain({list(self.given)!r})"


def bind_context(
    context: ContextLink | Sequence[ContextLink],
    *,
    session_id: str,
    agent: str,
    emit: Callable[[Event], None],
    model: str,
    params: Mapping[str, Any],
) -> SessionContext:
    """Bind an agent's context for one session: a list, or a link that stands for more than
    itself (``chain_links``), as a chain; any other link as it is."""
    link = (
        ContextChain.of(context)
        if isinstance(context, list | tuple) or callable(getattr(context, "chain_links", None))
        else cast("ContextLink", context)
    )
    return link.bind(session_id=session_id, agent=agent, emit=emit, model=model, params=params)


class _ChainContext:
    """One session's chain: its links' sessions, in order."""

    __slots__ = ("_reversed", "_senders", "_sessions", "_wrappers")

    def __init__(self, sessions: Sequence[SessionContext]) -> None:
        self._sessions = tuple(sessions)
        self._reversed = tuple(reversed(self._sessions))
        wrappers = (getattr(s, "wrap_complete", None) for s in self._sessions)
        self._wrappers: tuple[Callable[[int, Complete], Complete], ...] = tuple(
            w for w in wrappers if callable(w)
        )
        senders = (getattr(s, "before_send", None) for s in self._sessions)
        self._senders: tuple[Callable[[int], None], ...] = tuple(f for f in senders if callable(f))

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Run every link's ``before_turn`` in order, then their ``before_send``; the last
        prompt info given wins, and fills in a ``max_cacheable_tokens`` it leaves out
        from an earlier one."""
        for wrap in reversed(self._wrappers):  # the first link's wrapper is the outermost
            complete = wrap(turn, complete)
        info: PromptInfo | None = None
        for session in self._sessions:
            got = await session.before_turn(turn, messages, tools, complete)
            if got is not None:
                info = got if info is None else _merged(info, got)
        for send in self._senders:
            send(turn)
        return info

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Run every link's ``after_turn``, the last link's first."""
        for session in self._reversed:
            session.after_turn(turn, trace)

    def end(self) -> None:
        """Run every link's ``end`` (those that have one), the last link's first."""
        for session in self._reversed:
            end_session(session)

    def resume(self, resumed: Resumed) -> None:
        """Run every link's ``resume`` (those that have one), in order."""
        for session in self._sessions:
            resume_session(session, resumed)


def end_session(context: object) -> None:
    """``context.end()`` if it has one: the session ended. A link that raises there is
    logged, never let out: the session's end (its result, its record) comes first."""
    end = getattr(context, "end", None)
    if not callable(end):
        return
    try:
        end()
    except Exception as exc:
        _log.warning("context.end_failed", link=type(context).__name__, error=repr(exc))


def _merged(earlier: PromptInfo, later: PromptInfo) -> PromptInfo:
    if later.max_cacheable_tokens is None and earlier.max_cacheable_tokens is not None:
        return dataclasses.replace(later, max_cacheable_tokens=earlier.max_cacheable_tokens)
    return later


def is_prefix_source(link: object) -> bool:
    """A prefix index (it gives per-session trackers) rather than a link."""
    return not hasattr(link, "bind") and callable(getattr(link, "session", None))


def _no_repeats(links: Sequence[object]) -> None:
    seen: dict[int, object] = {}
    for link in links:
        if id(link) in seen:
            raise ConfigError(
                f"context link {link!r} is in the chain twice (it would run, and charge or "
                f"warn, twice per turn); give it once"
            )
        seen[id(link)] = link


class _PrefixLink(Link["_PrefixJoin"]):
    """A prefix index as a link: its session joins the budget before it, which
    fingerprints each prompt with its own counts (one count per message for both)."""

    __slots__ = ("index",)

    def __init__(self, index: object) -> None:
        self.index = index

    def session_for(self, at: Binding) -> _PrefixJoin:
        """A session that hands the index to the budget session before it."""
        return _PrefixJoin(at, self.index)

    def __repr__(self) -> str:
        return repr(self.index)


class _PrefixJoin(LinkSession):
    """Hands the prefix index to the budget session before it; does nothing itself."""

    __slots__ = ("_index",)

    def __init__(self, at: Binding, index: object) -> None:
        super().__init__(at)
        self._index = index

    def join(self, sessions: Sequence[object]) -> None:
        """Hand the index to the nearest budget session before this one."""
        for session in self.earlier(sessions):
            track = getattr(session, "track_prefixes", None)
            if callable(track):
                track(self._index)
                return
        raise ConfigError(
            f"the prefix index {self._index!r} needs a ContextBudget before it in the chain "
            f"(it fingerprints with the budget's token counts): "
            f"Agent(context=[ContextBudget(...), PrefixIndex()])"
        )
