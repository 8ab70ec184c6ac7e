"""One concrete conversation for the bench runner: :class:`SessionScript` and its turns.

A :class:`SessionScript` is when a session arrives, its system prompt, and per turn
(:class:`TurnScript`) the message appended before it (text, or a length to synthesise),
the output limit, the tool latency and think time that precede it, and the sub-agents
forked before it. The runner (``agentflow.bench._session``) executes scripts and nothing
else, so anything that produces them — sampling a workload
(:meth:`~agentflow.bench.Workload.sample`), or a recorded trace — is run the same way.

Synthetic text (:func:`synth_text`) is words of at most five letters, each one token on
the simulator's tokenizer and on common BPE tokenizers, so a length in tokens is what the
server counts (exactly on the simulator, closely elsewhere).
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from agentflow._errors import ConfigError

__all__ = ["SessionScript", "TurnScript", "blocks_text", "scripts_output_tokens", "synth_text"]

#: "No wait": the default of ``arrival_s``, ``tool_s`` and ``think_s``, and what the
#: workload's sampling hands out for no wait — one object, because msgspec's
#: ``omit_defaults`` leaves a field out only when its value *is* the default object. (When
#: the sampling and these records shared one module, Python merged its equal ``0.0``
#: constants into one object; this keeps sampled scripts encoding as they did.)
_NO_WAIT = 0.0


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
    tool_s: float = _NO_WAIT
    think_s: float = _NO_WAIT
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
        prefix_blocks: the system prompt as blocks of ``block_tokens`` synthetic tokens
            (:func:`blocks_text`), instead of ``system``: the text is made when the
            session starts, so a long trace does not hold every session's prefix up front.
        block_tokens: tokens per block of ``prefix_blocks``.
        system_key: identifies the system prompt among scripts that share it (equal keys,
            equal text): sessions with one key share one :class:`~agentflow.Agent`, so the
            scheduler and router see them as one prefix. ``None``: the script's own.
        seed: seeds the synthetic text of its turns (distinct sessions, distinct text).
        turns: its model turns, at least one.
    """

    session_id: str
    arrival_s: float = _NO_WAIT
    agent: str = "bench"
    system: str = ""
    prefix_blocks: tuple[int, ...] = ()
    block_tokens: int = 512
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
        if self.prefix_blocks and self.system:
            raise ConfigError(
                f"session {self.session_id!r}: give system or prefix_blocks, not both"
            )
        if self.block_tokens < 1:
            raise ConfigError(
                f"session {self.session_id!r}: block_tokens must be ≥ 1, got {self.block_tokens!r}"
            )

    def system_text(self) -> str:
        """The system prompt: ``system``, or the text of ``prefix_blocks`` (made now)."""
        if self.prefix_blocks:
            return blocks_text(self.prefix_blocks, self.block_tokens)
        return self.system

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


def scripts_output_tokens(scripts: Sequence[SessionScript]) -> int:
    """The output tokens ``scripts`` ask for at most, sub-agents included."""
    return sum(s.output_tokens for s in scripts)


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


def blocks_text(blocks: Sequence[int], block_tokens: int = 512) -> str:
    """The text of a prompt made of blocks: block ``b`` is always the same
    ``block_tokens`` synthetic tokens, so prompts whose ids start alike start with the
    same bytes."""
    return "".join(_block_text(b, block_tokens) for b in blocks).lstrip()


#: Characters of block text kept (the most recently used blocks): the shared ones are
#: met again and again, the rest of a long trace's blocks are made once each and need
#: not all stay in memory. Bounded in characters, not blocks: a trace's blocks may each
#: be millions of tokens long. (~7,000 blocks of Mooncake's 512 tokens.)
_BLOCK_CACHE_CHARS = 16 << 20

_blocks: OrderedDict[tuple[int, int], str] = OrderedDict()
_blocks_chars = 0
_blocks_lock = threading.Lock()


def _block_text(block: int, block_tokens: int) -> str:
    global _blocks_chars
    key = (block, block_tokens)
    with _blocks_lock:
        text = _blocks.get(key)
        if text is not None:
            _blocks.move_to_end(key)
            return text
    text = synth_text(block_tokens, f"block|{block}")
    if len(text) > _BLOCK_CACHE_CHARS // 4:  # kept, it would push out most others
        return text
    with _blocks_lock:
        if key not in _blocks:
            _blocks[key] = text
            _blocks_chars += len(text)
            while _blocks_chars > _BLOCK_CACHE_CHARS:
                _, old = _blocks.popitem(last=False)
                _blocks_chars -= len(old)
    return text
