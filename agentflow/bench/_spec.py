"""What ``agentflow bench`` runs, as data: workloads a user writes, and the scripts they
sample into.

Two layers:

- A :class:`Workload` is what a user writes (in JSON, or in Python): session templates
  whose figures are *distributions* (:class:`Constant`, :class:`Uniform`,
  :class:`LogNormal`, :class:`Zipf`; a plain number is a constant) — turns per session,
  prompt and output lengths, tool latency, think time — plus shared prompt prefixes
  (one global, and one per group), sub-agents that fork with a fresh context and rejoin
  (:class:`FanOut`), and a cache-busting option for a session's first turn.
- A :class:`SessionScript` is one concrete conversation: when it arrives, its system
  prompt, and per turn (:class:`TurnScript`) the message appended before it (text, or a
  length to synthesise), the output limit, the tool latency and think time that precede
  it, and the sub-agents forked before it. The runner (``agentflow.bench._session``)
  executes scripts and nothing else, so anything that produces them — sampling a
  workload (:meth:`Workload.sample`), or a recorded trace — is run the same way.

Everything is seeded: a workload sampled with the same seed gives the same scripts, and
each session's draws depend only on the seed and its index, never on the order sessions
are sampled in. Synthetic text (:func:`synth_text`) is words of at most five letters,
each one token on the simulator's tokenizer and on common BPE tokenizers, so a length in
tokens is what the server counts (exactly on the simulator, closely elsewhere).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from agentflow._errors import ConfigError

__all__ = [
    "Constant",
    "Dist",
    "FanOut",
    "LogNormal",
    "SessionScript",
    "SessionTemplate",
    "TurnScript",
    "Uniform",
    "Workload",
    "Zipf",
    "load_workload",
    "sample_value",
    "synth_text",
]


# ---- distributions -------------------------------------------------------------------


class Constant(msgspec.Struct, frozen=True, kw_only=True, tag="constant", tag_field="kind"):
    """Always ``value``. In JSON, a plain number means the same: ``"turns": 4``.

    Attributes:
        value: the value.
    """

    value: float

    def __post_init__(self) -> None:
        _finite("constant.value", self.value)

    def sample(self, rng: random.Random) -> float:
        """The value (``rng`` is not used)."""
        return self.value


class Uniform(msgspec.Struct, frozen=True, kw_only=True, tag="uniform", tag_field="kind"):
    """Uniform on ``[low, high]`` (integers: each whole number in it equally likely).

    Attributes:
        low, high: the bounds, ``low ≤ high``.
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        _finite("uniform.low", self.low)
        _finite("uniform.high", self.high)
        if self.low > self.high:
            raise ConfigError(f"uniform: low must be ≤ high, got low={self.low}, high={self.high}")

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        return rng.uniform(self.low, self.high)


class LogNormal(msgspec.Struct, frozen=True, kw_only=True, tag="lognormal", tag_field="kind"):
    """Log-normal with the given mean and shape, optionally clipped to ``[low, high]``.

    Long-tailed and positive: tool latencies, think times and prompt lengths of agentic
    traffic look like this. The underlying normal has ``σ = sigma`` and
    ``μ = ln(mean) − σ²/2``, so ``mean`` is the mean of the unclipped distribution.

    Attributes:
        mean: the mean (> 0).
        sigma: the shape σ (≥ 0; 0 is the constant ``mean``).
        low, high: clip draws to this range (``None``: no bound).
    """

    mean: float
    sigma: float = 1.0
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and self.mean > 0):
            raise ConfigError(f"lognormal.mean must be a finite number > 0, got {self.mean!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ConfigError(f"lognormal.sigma must be a finite number ≥ 0, got {self.sigma!r}")
        _bounds("lognormal", self.low, self.high)

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        mu = math.log(self.mean) - self.sigma**2 / 2
        return _clip(rng.lognormvariate(mu, self.sigma), self.low, self.high)


class Zipf(msgspec.Struct, frozen=True, kw_only=True, tag="zipf", tag_field="kind"):
    """Zipf on the integers ``low … high``: ``P(k) ∝ (k − low + 1) ** −s``.

    Most draws are small, a few are large: turns per session, sub-agents per fork.

    Attributes:
        s: the exponent (> 0; larger is more skewed towards ``low``).
        low, high: the range (integers, ``0 ≤ low ≤ high``; at most 1,000,000 values).
    """

    s: float = 1.2
    low: int = 1
    high: int = 100

    def __post_init__(self) -> None:
        if not (math.isfinite(self.s) and self.s > 0):
            raise ConfigError(f"zipf.s must be a finite number > 0, got {self.s!r}")
        if not 0 <= self.low <= self.high or self.high - self.low >= 1_000_000:
            raise ConfigError(
                f"zipf: need 0 ≤ low ≤ high and at most 1,000,000 values, "
                f"got low={self.low}, high={self.high}"
            )

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        cum = _zipf_cdf(self.s, self.high - self.low + 1)
        return self.low + bisect.bisect_left(cum, rng.random() * cum[-1])


#: A distribution: a plain number (a constant) or one of the tagged records. In JSON,
#: ``4``, ``{"kind": "uniform", "low": 1, "high": 8}``, ``{"kind": "lognormal", "mean":
#: 2.0, "sigma": 0.8}``, ``{"kind": "zipf", "s": 1.2, "low": 1, "high": 40}``.
Dist = int | float | Constant | Uniform | LogNormal | Zipf


def sample_value(dist: Dist, rng: random.Random) -> float:
    """One draw of ``dist``."""
    if isinstance(dist, int | float):
        return float(dist)
    return dist.sample(rng)


def _sample_int(dist: Dist, rng: random.Random, minimum: int) -> int:
    return max(minimum, round(sample_value(dist, rng)))


def _sample_s(dist: Dist, rng: random.Random) -> float:
    return max(0.0, sample_value(dist, rng))


@cache
def _zipf_cdf(s: float, n: int) -> list[float]:
    out: list[float] = []
    total = 0.0
    for k in range(1, n + 1):
        total += k**-s
        out.append(total)
    return out


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")


def _bounds(kind: str, low: float | None, high: float | None) -> None:
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{kind}: low must be ≤ high, got low={low}, high={high}")


def _clip(x: float, low: float | None, high: float | None) -> float:
    if low is not None and x < low:
        return low
    if high is not None and x > high:
        return high
    return x


def _check_dist(name: str, dist: Dist, *, minimum: float) -> None:
    """A distribution's support must not go below ``minimum`` where that is checkable."""
    if isinstance(dist, bool) or not isinstance(
        dist, int | float | Constant | Uniform | LogNormal | Zipf
    ):
        raise ConfigError(f"{name} must be a number or a distribution, got {dist!r}")
    lo: float | None
    if isinstance(dist, int | float):
        lo = float(dist)
        _finite(name, lo)
    elif isinstance(dist, Constant):
        lo = dist.value
    elif isinstance(dist, Uniform | Zipf):
        lo = dist.low
    else:
        lo = dist.low if dist.low is not None else None
    if lo is not None and lo < minimum:
        raise ConfigError(f"{name} must be ≥ {minimum:g}, but can be {lo:g}")


# ---- the scripts a runner executes ----------------------------------------------------


class TurnScript(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One model turn of a scripted session, and what comes before it.

    Before turn *k* (*k* ≥ 1) the session waits ``tool_s`` (the previous turn's tool
    running) and then ``think_s`` (the agent or its user thinking), forks ``subagents``
    (they run concurrently, from the moment the waits begin) and waits for all of them,
    then appends one user message — ``text`` (or ``tokens`` tokens of synthetic text)
    followed by each sub-agent's final answer — and sends the turn. Turn 0's message is
    the session's task; its waits are ignored (the session's ``arrival_s`` places it).

    Attributes:
        text: the message's text; ``None``: synthesise ``tokens`` tokens.
        tokens: length of the synthetic text when ``text`` is ``None``.
        max_tokens: the turn's output limit (``max_tokens`` in the request).
        tool_s: seconds of tool latency before this turn.
        think_s: seconds of think time before this turn, after the tool.
        subagents: sessions forked before this turn; their answers rejoin in its message.
    """

    text: str | None = None
    tokens: int = 0
    max_tokens: int = 128
    tool_s: float = 0.0
    think_s: float = 0.0
    subagents: tuple[SessionScript, ...] = ()

    def __post_init__(self) -> None:
        if self.text is None and self.tokens < 1:
            raise ConfigError(f"turn: tokens must be ≥ 1 when text is not given, got {self.tokens}")
        if self.max_tokens < 1:
            raise ConfigError(f"turn: max_tokens must be ≥ 1, got {self.max_tokens}")
        for name in ("tool_s", "think_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"turn: {name} must be a finite number ≥ 0, got {value!r}")


class SessionScript(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One concrete conversation for the runner: everything decided, nothing random.

    Made by :meth:`Workload.sample` (or, for replays, from a trace's records: one script
    per recorded session, one :class:`TurnScript` per recorded request, the recorded gaps
    as ``tool_s``/``think_s``, message texts or token lengths as ``text``/``tokens``).

    Attributes:
        session_id: unique within a run.
        arrival_s: when it starts, in seconds after the run's (or level's) start; for a
            sub-agent, after its fork.
        agent: its label in per-agent figures (the template's name).
        system: the system prompt (the shared prefix); ``""``: none.
        system_key: identifies ``system`` among scripts that share it (equal keys, equal
            text): sessions with one key share one :class:`~agentflow.Agent`, so the
            scheduler and router see them as one prefix. ``None``: the script's own.
        seed: seeds the synthetic text of its turns (distinct sessions, distinct text).
        turns: its model turns, at least one.
    """

    session_id: str
    arrival_s: float = 0.0
    agent: str = "bench"
    system: str = ""
    system_key: str | None = None
    seed: int = 0
    turns: tuple[TurnScript, ...]

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ConfigError("session: session_id must be a non-empty string")
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise ConfigError(
                f"session {self.session_id!r}: arrival_s must be a finite number ≥ 0, "
                f"got {self.arrival_s!r}"
            )
        if not self.turns:
            raise ConfigError(f"session {self.session_id!r}: turns must not be empty")

    @property
    def output_tokens(self) -> int:
        """Output tokens it asks for at most (its own turns and its sub-agents')."""
        return sum(t.max_tokens + sum(s.output_tokens for s in t.subagents) for t in self.turns)

    def turn_text(self, index: int) -> str:
        """Turn ``index``'s own text (without sub-agent answers): given, or synthesised."""
        turn = self.turns[index]
        if turn.text is not None:
            return turn.text
        return synth_text(turn.tokens, f"{self.seed}|{self.session_id}|{index}")


# ---- the workload a user writes -------------------------------------------------------


class FanOut(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
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
        _check_dist("fanout.width", self.width, minimum=1)
        if not 0 <= self.probability <= 1:
            raise ConfigError(f"fanout.probability must be in [0, 1], got {self.probability!r}")
        if self.max_forks < 0:
            raise ConfigError(f"fanout.max_forks must be ≥ 0, got {self.max_forks}")


class SessionTemplate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
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
        _check_dist(f"{where}: turns", self.turns, minimum=1)
        if self.first_prompt_tokens is not None:
            _check_dist(f"{where}: first_prompt_tokens", self.first_prompt_tokens, minimum=1)
        _check_dist(f"{where}: prompt_tokens", self.prompt_tokens, minimum=1)
        _check_dist(f"{where}: output_tokens", self.output_tokens, minimum=1)
        _check_dist(f"{where}: tool_latency_s", self.tool_latency_s, minimum=0)
        _check_dist(f"{where}: think_time_s", self.think_time_s, minimum=0)


class Workload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
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
        if self.shared_prefix_tokens < 0:
            raise ConfigError(
                f"workload {self.name!r}: shared_prefix_tokens must be ≥ 0, "
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
            if n < 0:
                raise ConfigError(
                    f"workload {self.name!r}: group_prefix_tokens[{group!r}] must be ≥ 0, got {n}"
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

    def sample(self, index: int, *, seed: int = 0, arrival_s: float = 0.0) -> SessionScript:
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
        n_turns = _sample_int(tmpl.turns, rng, 1)
        first = tmpl.first_prompt_tokens if tmpl.first_prompt_tokens is not None else None
        turns: list[TurnScript] = []
        forks = 0
        fork_next: tuple[SessionScript, ...] = ()
        for k in range(n_turns):
            tokens = _sample_int(
                first if (k == 0 and first is not None) else tmpl.prompt_tokens, rng, 1
            )
            turns.append(
                TurnScript(
                    tokens=tokens,
                    max_tokens=_sample_int(tmpl.output_tokens, rng, 1),
                    tool_s=_sample_s(tmpl.tool_latency_s, rng) if k else 0.0,
                    think_s=_sample_s(tmpl.think_time_s, rng) if k else 0.0,
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
                width = _sample_int(fan.width, rng, 1)
                fork_next = tuple(
                    self._session(
                        sub_t, f"{session_id}/{sub_t.name}-{forks}.{j}", rng, 0.0, (system, key)
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


# ---- synthetic text -------------------------------------------------------------------

_WORDS = tuple(
    """the of and to in is that for it as with was on be by this are from at or an which
    but not have has had were can all their there been if more when will would who so no
    agent fleet token cache queue batch step model tool call file test value error time
    first last each every other same new old small large fast slow good check read write
    fix add keep make use find show start stop wait send count also only then than just
    still even most many much few data code line list map set key name path type user
    plan task goal state note loop node edge tree graph rule case part size rate load
    cost sum mean peak run build chunk block page log""".split()
)


def synth_text(tokens: int, seed: str | int) -> str:
    """``tokens`` tokens of deterministic text: words of at most five letters, each with
    its leading space — one token each on the simulator's tokenizer (and on most BPE
    tokenizers), so the server counts ``tokens`` of them (exactly on the simulator)."""
    if tokens <= 0:
        return ""
    rng = random.Random(seed)
    words = rng.choices(_WORDS, k=tokens)
    return " " + " ".join(words)


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


def scripts_output_tokens(scripts: Sequence[SessionScript]) -> int:
    """The output tokens ``scripts`` ask for at most, sub-agents included."""
    return sum(s.output_tokens for s in scripts)
