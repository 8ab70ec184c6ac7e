"""Prefix-reuse efficiency: how much of the reusable prompt the server's cache served.

For every turn two figures may be known: the prompt tokens the server *reported* as
served from its prefix cache (``TurnMetrics.cached_tokens``; ``None`` when the server
did not say), and the *theoretical maximum* — the prompt's leading tokens that any
prefix cache could have served because an earlier request (of any session) already
sent them, or the server generated them: a server caches the tokens of its replies
too, and the next prompt repeats the reply (``PromptInfo.max_cacheable_tokens``;
``None`` when prefixes were not fingerprinted, i.e. the agent has no context policy
that fingerprints). Their ratio, summed over the turns where both are known, is the
prefix-reuse efficiency::

    efficiency = Σ cached_tokens / Σ max(max_cacheable_tokens, cached_tokens)
                                                    (turns reporting both)

1.0 means every reusable token hit; less means the cache evicted, the prefix was not
byte-stable, or requests that share a prefix raced each other cold. It cannot exceed
1.0: a cache serves nothing that was not cacheable, so a turn whose server reported
more cached tokens than the client's maximum proves the maximum short — it is counted
in the local tokenizer's tokens and scaled to the server's by the whole prompt's
ratio, which a prefix of another kind of text (JSON schemas, code) need not share.
Such a turn's maximum is raised to the server's figure, and the report says on how
many turns and by how much (``turns_raised``, ``raised_tokens``). The other way, a
maximum scaled up past the prompt itself (a session's first turn, before the ratio has
learnt anything) is capped to the prompt the server reported less one token (a server
computes at least the last one), and the ``note`` says on how many turns (a maximum equal
to the prompt is capped without a word). A turn is said one way only, by the net change
to the client's figure: one capped below what the server then cached is raised to it
again, and counted as capped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentflow._session import SessionResult, TurnRecord

__all__ = ["PrefixReuse", "PrefixReuseReport", "prefix_reuse"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixReuse:
    """Prefix-reuse figures of one agent, or of the whole fleet.

    Sums are over the turns that reported the figure; ``None`` means no turn did.

    Attributes:
        sessions: sessions counted.
        turns: model turns counted.
        prompt_tokens: prompt tokens the server reported.
        cached_tokens: prompt tokens the server reported as served from its prefix cache.
        max_cacheable_tokens: the theoretical maximum of cacheable prompt tokens, each
            turn's at most its prompt tokens less one where the server reported them.
        turns_with_cached: turns whose server reported cached tokens.
        turns_with_max: turns whose prefix was fingerprinted.
        turns_compared: turns with both figures (the efficiency's turns).
        compared_cached_tokens: cached tokens over those turns.
        compared_max_cacheable_tokens: the maximum over those turns, each turn's raised
            to its cached tokens where the server reported more (never below
            ``compared_cached_tokens``).
        efficiency: ``compared_cached_tokens / compared_max_cacheable_tokens`` (at most
            1.0); ``None`` when no turn has both figures, or their maximum is zero.
        hit_rate: cached / prompt tokens over the turns that reported both.
        turns_raised: compared turns whose server reported more cached tokens than the
            client's own maximum (a local tokenizer unlike the server's); their maximum was
            raised to the cached figure. A maximum above the prompt, capped and then raised
            to a cached figure still below it, is counted as capped (in the ``note``).
        raised_tokens: by how many tokens, summed over those turns.
        note: empty when every turn had both figures and no maximum was raised or
            capped; else what was missing, raised or capped.
    """

    sessions: int
    turns: int
    prompt_tokens: int | None
    cached_tokens: int | None
    max_cacheable_tokens: int | None
    turns_with_cached: int
    turns_with_max: int
    turns_compared: int
    compared_cached_tokens: int
    compared_max_cacheable_tokens: int
    efficiency: float | None
    hit_rate: float | None
    turns_raised: int
    raised_tokens: int
    note: str

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return asdict(self)

    def describe(self) -> str:
        """One line: the efficiency and what it is made of, or why there is none."""
        if self.efficiency is None:
            return f"prefix reuse: not available — {self.note}"
        text = (
            f"prefix reuse {self.efficiency:.1%}: {self.compared_cached_tokens:,} cached of "
            f"{self.compared_max_cacheable_tokens:,} cacheable prompt tokens "
            f"over {self.turns_compared} turn{'' if self.turns_compared == 1 else 's'}"
        )
        return f"{text} ({self.note})" if self.note else text


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixReuseReport:
    """Prefix-reuse efficiency per agent and for the fleet.

    Attributes:
        per_agent: figures per agent name, in name order.
        fleet: figures over every turn of every session.
    """

    per_agent: dict[str, PrefixReuse]
    fleet: PrefixReuse

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict: ``{"fleet": {...}, "per_agent": {name: {...}}}``."""
        return {
            "fleet": self.fleet.to_dict(),
            "per_agent": {name: r.to_dict() for name, r in self.per_agent.items()},
        }

    def lines(self) -> list[str]:
        """Human-readable lines: the fleet, then each agent."""
        out = [f"fleet: {self.fleet.describe()}"]
        out += [f"{name}: {r.describe()}" for name, r in self.per_agent.items()]
        return out


class _Sums:
    __slots__ = (
        "both",
        "both_cached",
        "both_max",
        "cached",
        "capped",
        "capped_tokens",
        "hit_cached",
        "hit_prompt",
        "max",
        "n_cached",
        "n_max",
        "n_prompt",
        "prompt",
        "raised",
        "raised_tokens",
        "sessions",
        "turns",
    )

    def __init__(self) -> None:
        self.sessions = self.turns = 0
        self.prompt = self.cached = self.max = 0
        self.n_prompt = self.n_cached = self.n_max = 0
        self.both = self.both_cached = self.both_max = 0
        self.hit_prompt = self.hit_cached = 0
        self.raised = self.raised_tokens = 0
        self.capped = self.capped_tokens = 0

    def add(self, turn: TurnRecord) -> None:
        self.turns += 1
        prompt = turn.metrics.prompt_tokens
        cached = turn.metrics.cached_tokens
        best = turn.prompt.max_cacheable_tokens if turn.prompt is not None else None
        own = best  # the client's figure, before the server's counts correct it
        if best is not None and prompt is not None:
            # A server computes at least the prompt's last token: at most prompt - 1.
            best = min(best, max(prompt - 1, 0))
        if prompt is not None:
            self.n_prompt += 1
            self.prompt += prompt
        if cached is not None:
            self.n_cached += 1
            self.cached += cached
            if prompt is not None:
                self.hit_prompt += prompt
                self.hit_cached += cached
        if best is not None:
            self.n_max += 1
            self.max += best
        if cached is not None and best is not None:
            self.both += 1
            self.both_cached += cached
            # The server served it, so it was cacheable: at least the cached figure.
            best = max(best, cached)
            self.both_max += best
        if own is None or best is None:
            return
        # Said in the note by the net change to the client's figure, each turn one way:
        # more than the client's maximum cached (the estimate was short), or a maximum
        # past the prompt itself (the conversion to the server's tokens was long). A
        # maximum equal to the prompt, one token over, is capped without a word.
        if best > own:
            self.raised += 1
            self.raised_tokens += best - own
        elif best < own and prompt is not None and own > prompt:
            self.capped += 1
            self.capped_tokens += own - best

    def figures(self) -> PrefixReuse:
        return PrefixReuse(
            sessions=self.sessions,
            turns=self.turns,
            prompt_tokens=self.prompt if self.n_prompt else None,
            cached_tokens=self.cached if self.n_cached else None,
            max_cacheable_tokens=self.max if self.n_max else None,
            turns_with_cached=self.n_cached,
            turns_with_max=self.n_max,
            turns_compared=self.both,
            compared_cached_tokens=self.both_cached,
            compared_max_cacheable_tokens=self.both_max,
            efficiency=self.both_cached / self.both_max if self.both_max else None,
            hit_rate=self.hit_cached / self.hit_prompt if self.hit_prompt else None,
            turns_raised=self.raised,
            raised_tokens=self.raised_tokens,
            note=self._note(),
        )

    def _note(self) -> str:
        if self.turns == 0:
            return "no turns"
        parts: list[str] = []
        if self.n_cached == 0:
            parts.append("the server reported no cached tokens")
        elif self.n_cached < self.turns:
            parts.append(f"cached tokens reported for {self.n_cached} of {self.turns} turns")
        if self.n_max == 0:
            parts.append(
                "prefixes were not fingerprinted (no context policy with fingerprints), "
                "so the cacheable maximum is unknown"
            )
        elif self.n_max < self.turns:
            parts.append(f"prefixes fingerprinted for {self.n_max} of {self.turns} turns")
        if self.both and self.both_max == 0:
            parts.append("nothing was cacheable yet (every prefix was new)")
        if self.raised:
            parts.append(
                f"the server cached more than the client's maximum on {self.raised} of "
                f"{self.both} turns (+{self.raised_tokens:,} tokens; raised to it: the local "
                "tokenizer differs from the server's)"
            )
        if self.capped:
            parts.append(
                f"the client's maximum exceeded the prompt on {self.capped} of {self.n_max} "
                f"turns (−{self.capped_tokens:,} tokens; capped to the prompt less one token, "
                "or to the server's cached figure if more: the local tokenizer differs from "
                "the server's)"
            )
        return "; ".join(parts)


def prefix_reuse(results: Iterable[SessionResult]) -> PrefixReuseReport:
    """Prefix-reuse efficiency per agent and for the fleet, from finished sessions.

    Every turn of every session counts, whatever the session's status; a figure a turn
    lacks (``cached_tokens`` not reported by the server, ``max_cacheable_tokens`` not
    fingerprinted) is left out of that figure's sums and said in the ``note``.
    """
    agents: dict[str, _Sums] = {}
    fleet = _Sums()
    for result in results:
        sums = agents.get(result.agent)
        if sums is None:
            sums = agents[result.agent] = _Sums()
        sums.sessions += 1
        fleet.sessions += 1
        for turn in result.turns:
            sums.add(turn)
            fleet.add(turn)
    return PrefixReuseReport(
        per_agent={name: agents[name].figures() for name in sorted(agents)},
        fleet=fleet.figures(),
    )
