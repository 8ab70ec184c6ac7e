"""The workload a user writes: session templates, the prefixes they share, and sampling.

A :class:`Workload` (in JSON, :func:`load_workload`, or in Python) has session templates
(:class:`SessionTemplate`) whose figures are distributions (``agentflow.bench._dist``)
— turns per session, prompt and output lengths, tool latency, think time — plus shared
prompt prefixes (one global, and one per group), sub-agents that fork with a fresh
context and rejoin (:class:`FanOut`), and a cache-busting option for a session's first
turn. :meth:`Workload.sample` turns it into :class:`~agentflow.bench.SessionScript`
records, one per session.

Sampling is seeded: a workload sampled with the same seed gives the same scripts, and
each session's draws depend only on the seed and its index, never on the order sessions
are sampled in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from agentflow._errors import ConfigError
from agentflow.bench._dist import Dist, Uniform, _check_dist, sample_value
from agentflow.bench._script import _NO_WAIT, SessionScript, TurnScript, synth_text

__all__ = ["FanOut", "SessionTemplate", "Workload", "load_workload"]

#: The most turns a session may have, tokens one figure may be (a prompt's, a message's,
#: a prefix's: ten 1M-token windows) and sub-agents one fork may make: a larger figure is
#: a typo, which would otherwise hang the bench or run it out of memory.
MAX_TURNS, MAX_TOKENS, MAX_WIDTH = 10_000, 10_000_000, 1_000


class FanOut(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """Sub-agents a session forks and waits for (fan-out / fan-in).

    After a parent turn (not its last), with probability ``probability`` and while it
    has forked fewer than ``max_forks`` times, the parent forks ``width`` sub-agent
    sessions of template ``template``. Each starts with a fresh context — the parent's
    system prompt (so the server's prefix cache serves it from the parent's) and its own
    task — and runs its own turns; the parent's next turn waits for all of them and gets
    their final answers appended to its message.

    Attributes:
        template: the name of the sub-agents' :class:`SessionTemplate` (one without a
            ``fanout`` of its own).
        width: sub-agents per fork (≥ 1).
        probability: the chance a turn is followed by a fork.
        max_forks: the most forks in one parent session.
    """

    template: str
    width: Dist = 2
    probability: float = 1.0
    max_forks: int = 1

    def __post_init__(self) -> None:
        _check_dist("fanout.width", self.width, minimum=1, maximum=MAX_WIDTH)
        if not 0 <= self.probability <= 1:
            raise ConfigError(f"fanout.probability must be in [0, 1], got {self.probability!r}")
        if self.max_forks < 0:
            raise ConfigError(f"fanout.max_forks must be ≥ 0, got {self.max_forks}")


class SessionTemplate(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """A kind of session in a workload; each session samples its figures from it.

    Attributes:
        name: its name (sessions are labelled with it; sub-agents refer to it).
        weight: its share of sessions (relative to the other templates' weights; 0 for
            a template used only as sub-agents).
        group: the name of its group prefix in :attr:`Workload.group_prefix_tokens`
            (sessions of one group share it, after the global prefix); ``None``: none.
        turns: model turns per session (≥ 1).
        first_prompt_tokens: length of the task (the first user message); ``None``: as
            ``prompt_tokens``.
        prompt_tokens: tokens each later turn appends (the tool result or user message).
        output_tokens: each turn's output limit (sent as ``max_tokens``; with
            :attr:`Workload.ignore_eos` the server generates exactly that many).
        tool_latency_s: seconds a tool runs between two turns.
        think_time_s: seconds of think time between two turns, after the tool.
        fanout: sub-agents its sessions fork and wait for.
        cache_bust: make the first turn miss the prefix cache: a unique marker starts
            the session's system prompt (its later turns still hit its own history; it
            shares no prefix with other sessions).
    """

    name: str
    weight: float = 1.0
    group: str | None = None
    turns: Dist = 1
    first_prompt_tokens: Dist | None = None
    prompt_tokens: Dist = 256
    output_tokens: Dist = 128
    tool_latency_s: Dist = 0.0
    think_time_s: Dist = 0.0
    fanout: FanOut | None = None
    cache_bust: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("template: name must be a non-empty string")
        where = f"template {self.name!r}"
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ConfigError(f"{where}: weight must be a finite number ≥ 0, got {self.weight!r}")
        _check_dist(f"{where}: turns", self.turns, minimum=1, maximum=MAX_TURNS)
        if self.first_prompt_tokens is not None:
            _check_dist(
                f"{where}: first_prompt_tokens",
                self.first_prompt_tokens,
                minimum=1,
                maximum=MAX_TOKENS,
            )
        _check_dist(f"{where}: prompt_tokens", self.prompt_tokens, minimum=1, maximum=MAX_TOKENS)
        _check_dist(f"{where}: output_tokens", self.output_tokens, minimum=1, maximum=MAX_TOKENS)
        _check_dist(f"{where}: tool_latency_s", self.tool_latency_s, minimum=0)
        _check_dist(f"{where}: think_time_s", self.think_time_s, minimum=0)


class Workload(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """A synthetic agentic workload: session templates and the prefixes they share.

    Write it in JSON (``load_workload``) or build it in Python. A session's system
    prompt is ``shared_prefix_tokens`` tokens every session shares, then its group's
    ``group_prefix_tokens[group]`` tokens; its first user message is its task, and
    each later turn appends one message (a tool result, a user's reply).

    Attributes:
        name: a label for reports.
        templates: the kinds of session (at least one with ``weight > 0``).
        shared_prefix_tokens: length of the prefix every session's system prompt starts
            with (instructions and tool descriptions, say); 0: none.
        group_prefix_tokens: per group name, the length of the prefix its sessions
            share after the global one.
        ignore_eos: ask the server to generate exactly ``max_tokens`` (the
            ``ignore_eos`` body field vLLM and llama.cpp read); off for servers that
            reject unknown fields.
        description: one line for humans.
    """

    templates: tuple[SessionTemplate, ...]
    name: str = "workload"
    shared_prefix_tokens: int = 0
    group_prefix_tokens: dict[str, int] = msgspec.field(default_factory=dict)
    ignore_eos: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        if not self.templates:
            raise ConfigError(f"workload {self.name!r}: templates must not be empty")
        names = [t.name for t in self.templates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"workload {self.name!r}: duplicate template names {dupes}")
        if not any(t.weight > 0 for t in self.templates):
            raise ConfigError(f"workload {self.name!r}: no template has weight > 0")
        if not 0 <= self.shared_prefix_tokens <= MAX_TOKENS:
            raise ConfigError(
                f"workload {self.name!r}: shared_prefix_tokens must be in [0, {MAX_TOKENS:,}], "
                f"got {self.shared_prefix_tokens}"
            )
        by_name = {t.name: t for t in self.templates}
        for t in self.templates:
            if t.group is not None and t.group not in self.group_prefix_tokens:
                raise ConfigError(
                    f"workload {self.name!r}: template {t.name!r} has group {t.group!r}, "
                    f"which group_prefix_tokens does not define"
                )
            if t.fanout is not None:
                sub = by_name.get(t.fanout.template)
                if sub is None:
                    raise ConfigError(
                        f"workload {self.name!r}: template {t.name!r} forks unknown template "
                        f"{t.fanout.template!r}"
                    )
                if sub.fanout is not None:
                    raise ConfigError(
                        f"workload {self.name!r}: sub-agent template {sub.name!r} may not "
                        f"fork sub-agents of its own"
                    )
        for group, n in self.group_prefix_tokens.items():
            if not 0 <= n <= MAX_TOKENS:
                raise ConfigError(
                    f"workload {self.name!r}: group_prefix_tokens[{group!r}] must be in "
                    f"[0, {MAX_TOKENS:,}], got {n}"
                )

    def template(self, name: str) -> SessionTemplate:
        """The template called ``name``.

        Raises:
            ConfigError: no such template.
        """
        for t in self.templates:
            if t.name == name:
                return t
        raise ConfigError(f"workload {self.name!r} has no template {name!r}")

    def system_prompt(self, group: str | None) -> str:
        """The shared system prompt of sessions in ``group`` (global prefix, then group's)."""
        return _system_prompt(self, group)

    def sample(self, index: int, *, seed: int = 0, arrival_s: float = _NO_WAIT) -> SessionScript:
        """Session number ``index``'s script: a function of ``seed`` and ``index`` only.

        Args:
            index: the session's number in the run (its id is ``"{template}-{index}"``).
            seed: the run's seed.
            arrival_s: when it starts (from the load pattern).
        """
        rng = random.Random(f"{seed}|{index}")
        weighted = [t for t in self.templates if t.weight > 0]
        tmpl = rng.choices(weighted, weights=[t.weight for t in weighted])[0]
        return self._session(tmpl, f"{tmpl.name}-{index}", rng, arrival_s, None)

    def _session(
        self,
        tmpl: SessionTemplate,
        session_id: str,
        rng: random.Random,
        arrival_s: float,
        parent_system: tuple[str, str | None] | None,
    ) -> SessionScript:
        if parent_system is not None:  # a sub-agent: the parent's prefix, byte for byte
            system, key = parent_system
        else:
            system, key = self.system_prompt(tmpl.group), f"{self.name}|{tmpl.group}"
            if tmpl.cache_bust:
                system = f"[{session_id} {rng.getrandbits(64):016x}]\n{system}"
                key = None
        n_turns = _sample_int(tmpl.turns, rng, 1, MAX_TURNS)
        first = tmpl.first_prompt_tokens if tmpl.first_prompt_tokens is not None else None
        turns: list[TurnScript] = []
        forks = 0
        fork_next: tuple[SessionScript, ...] = ()
        for k in range(n_turns):
            tokens = _sample_int(
                first if (k == 0 and first is not None) else tmpl.prompt_tokens,
                rng,
                1,
                MAX_TOKENS,
            )
            turns.append(
                TurnScript(
                    tokens=tokens,
                    max_tokens=_sample_int(tmpl.output_tokens, rng, 1, MAX_TOKENS),
                    tool_s=_sample_s(tmpl.tool_latency_s, rng) if k else _NO_WAIT,
                    think_s=_sample_s(tmpl.think_time_s, rng) if k else _NO_WAIT,
                    subagents=fork_next,
                )
            )
            fork_next = ()
            fan = tmpl.fanout
            if (
                fan is not None
                and k < n_turns - 1
                and forks < fan.max_forks
                and rng.random() < fan.probability
            ):
                sub_t = self.template(fan.template)
                width = _sample_int(fan.width, rng, 1, MAX_WIDTH)
                fork_next = tuple(
                    self._session(
                        sub_t,
                        f"{session_id}/{sub_t.name}-{forks}.{j}",
                        rng,
                        _NO_WAIT,
                        (system, key),
                    )
                    for j in range(width)
                )
                forks += 1
        return SessionScript(
            session_id=session_id,
            arrival_s=arrival_s,
            agent=tmpl.name,
            system=system,
            system_key=key,
            seed=rng.getrandbits(32),
            turns=tuple(turns),
        )


def load_workload(source: str | Path | Mapping[str, Any]) -> Workload:
    """A workload from a JSON file, a JSON string, or a mapping (as JSON decodes).

    Raises:
        ConfigError: unreadable, not JSON, or a field is wrong (the message names it,
            with its path in the document, e.g. ``$.templates[0].turns``).
    """
    try:
        if isinstance(source, Mapping):
            return msgspec.convert(source, type=Workload)
        if isinstance(source, Path) or not source.lstrip().startswith("{"):
            try:
                data = Path(source).read_bytes()
            except OSError as exc:
                raise ConfigError(f"workload file {str(source)!r}: {exc.strerror}") from None
        else:
            data = source.encode()
        return msgspec.json.decode(data, type=Workload)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"workload: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"workload: not valid JSON: {exc}") from None


def _sample_int(dist: Dist, rng: random.Random, minimum: int, maximum: int) -> int:
    """A whole-number draw in ``[minimum, maximum]``; a uniform one takes each whole
    number of its range equally often (rounding a real draw would halve the ends')."""
    if isinstance(dist, Uniform):
        lo, hi = math.ceil(dist.low), math.floor(dist.high)
        if lo <= hi:  # one draw of rng, as rng.uniform makes
            return min(maximum, max(minimum, lo + min(hi - lo, int(rng.random() * (hi - lo + 1)))))
    return min(maximum, max(minimum, round(sample_value(dist, rng))))


def _sample_s(dist: Dist, rng: random.Random) -> float:
    return max(_NO_WAIT, sample_value(dist, rng))


# ---- shared prefixes ------------------------------------------------------------------


@cache
def _prefix_text(tokens: int, salt: str) -> str:
    return synth_text(tokens, f"prefix|{salt}") if tokens else ""


def _system_prompt(w: Workload, group: str | None) -> str:
    group_tokens = w.group_prefix_tokens[group] if group is not None else 0
    return _joined_prefix(w.name, w.shared_prefix_tokens, group, group_tokens)


@cache
def _joined_prefix(name: str, shared: int, group: str | None, group_tokens: int) -> str:
    """One string per (workload, group), shared by every session that uses it."""
    parts = [_prefix_text(shared, f"{name}|global")]
    if group is not None:
        parts.append(_prefix_text(group_tokens, f"{name}|group|{group}"))
    return "".join(parts).lstrip()
