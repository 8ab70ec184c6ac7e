"""What the simulated model says: a deterministic output plan for each request.

The output of a request is decided when it is added, as a whole: an
:class:`OutputPlan` (its tokens, their text, tool calls, the finish reason if it runs
to the end). The engine then only decides *when* each token comes out, and may cut
the plan short (``max_tokens``, ``max_model_len``: finish reason ``"length"``).

The choice follows an agent's loop: while the conversation has had fewer than
``tool_rounds`` tool-calling assistant turns and the request offers ``tools``, the
model calls one (or more) of them with arguments that satisfy its JSON schema; then it
gives a final text answer made of words from a word list. ``tool_choice`` is obeyed
(``"none"``, ``"required"``, a named function). ``stop`` strings cut a text answer
before the first occurrence (finish reason ``"stop"``).

The rounds so far are those the request shows, or — for a request that names its
conversation (``session_id``, from the ``X-Session-ID`` header) — every round that
conversation's requests have shown, so that a client that compacts its history still
gets its final answer (:mod:`agentflow.sim.sessions`).

Everything is a function of the generator's seed, an optional per-request salt, the
request's prompt tokens and, for a named conversation, the rounds it showed before, so the
same requests give the same output on every run.
"""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.sim.arguments import SchemaError, generate_value
from agentflow.sim.errors import RequestRejected
from agentflow.sim.plan import OutputPlan, PlannedToolCall
from agentflow.sim.sessions import SessionRounds
from agentflow.sim.tokenizer import IM_END, Tokenizer, assistant_body, render_tool_call

__all__ = [
    "DEFAULT_WORDS",
    "TextGenConfig",
    "TextGenerator",
    "count_tool_rounds",
]

_WORDS_TEXT = """
the of and to in is that for it as with was on be by this are from at or an which but
not have has had were can all their there been if more when will would who so no agent
agents fleet token tokens cache prefix request server model batch step queue schedule
latency throughput context window block session turn tool call result file function
test tests module build run runs value values error errors report metric metrics time
first last each every other same new old small large fast slow good check read write
update change fix add remove keep make use find show return start stop wait send
receive count measure compare between before after during within because while until
since also only then than just still even most many much few
"""

#: The default vocabulary of final answers.
DEFAULT_WORDS: tuple[str, ...] = tuple(_WORDS_TEXT.split())
#: The default ``(min, max)`` tokens of a final answer.
_ANSWER_TOKENS = (32, 256)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextGenConfig:
    """How the simulated model behaves.

    Attributes:
        tool_rounds: tool-calling turns a conversation gets before the final answer
            (counted as assistant messages with ``tool_calls`` in the request, and, for
            a request with a session id, in that session's earlier requests).
        answer_tokens: ``(min, max)`` tokens of a final answer before its end token; the
            max at most the window of the engine it runs on (:meth:`check_window`).
        tool_calls_per_turn: ``(min, max)`` calls in a tool-calling turn (1 when the
            request sets ``parallel_tool_calls: false``).
        words: the vocabulary of answers.
        sessions: conversations whose tool rounds are remembered by session id (least
            recently used forgotten first; 0: count only the rounds a request shows).
    """

    tool_rounds: int = 3
    answer_tokens: tuple[int, int] = _ANSWER_TOKENS
    tool_calls_per_turn: tuple[int, int] = (1, 1)
    words: tuple[str, ...] = DEFAULT_WORDS
    sessions: int = 10_000

    def __post_init__(self) -> None:
        check_count(self.tool_rounds, "TextGenConfig.tool_rounds", 0)
        check_count(self.sessions, "TextGenConfig.sessions", 0)
        for fname in ("answer_tokens", "tool_calls_per_turn"):
            pair = _range(getattr(self, fname), f"TextGenConfig.{fname}")
            object.__setattr__(self, fname, pair)  # a list given becomes the tuple it names
        if not self.words:
            raise ValueError("words must not be empty")

    def check_window(self, max_model_len: int, name: str = "TextGenConfig.answer_tokens") -> None:
        """Refuse an ``answer_tokens`` max beyond a model's window: no answer can be longer
        than ``max_model_len``, so a larger max is a slip (a digit too many) — but not the
        default's, which a small window cuts as it cuts any answer. The engine checks its
        configuration so; ``agentflow sim`` names its flag (``name``).

        Raises:
            ConfigError: naming ``name`` and the max.
        """
        hi = self.answer_tokens[1]
        if hi > max_model_len and self.answer_tokens != _ANSWER_TOKENS:
            raise ConfigError(
                f"{name} max {hi}: more than the profile's window (max_model_len "
                f"{max_model_len}), which no answer can exceed"
            )


def _range(value: object, name: str) -> tuple[int, int]:
    """``value`` as ``(min, max)``: two ints (no bools) with 0 < min ≤ max.

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    if isinstance(value, tuple | list) and len(value) == 2:
        lo, hi = value
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value) and 0 < lo <= hi:
            return lo, hi
    raise ConfigError(f"{name} must be (min, max), ints with 0 < min ≤ max, got {value!r}")


def count_tool_rounds(messages: Sequence[Mapping[str, Any]]) -> int:
    """Assistant messages with tool calls in a conversation: the tool rounds so far."""
    return sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))


def _answer_parts(rng: random.Random, words: Sequence[str]) -> Iterator[tuple[list[str], int]]:
    """An answer's text, part after part: sentences of 5–16 words, a blank line every four
    sentences; with each step's parts, their cost in the running estimate of tokens
    (words of ≤ 5 letters are one token with their space)."""
    sentence_left = 0
    sentences = 0
    first = True
    after_break = False
    while True:
        parts: list[str] = []
        cost = 0
        if sentence_left == 0:
            sentence_left = rng.randint(5, 16)
            after_break = False
            if not first:
                parts.append(".")
                sentences += 1
                cost += 1
                if sentences % 4 == 0:
                    parts.append("\n\n")
                    cost += 1
                    after_break = True
            word = rng.choice(words).capitalize()
            parts.append(word if first or after_break else " " + word)
        else:
            parts.append(" " + rng.choice(words))
        first = False
        cost += 1 + len(parts[-1]) // 7
        sentence_left -= 1
        yield parts, cost


class TextGenerator:
    """Plans each request's output, deterministically.

    Args:
        tokenizer: the tokenizer prompts and outputs share.
        seed: the seed; with the request, it fixes the output.
        config: behaviour (tool rounds, answer lengths); the defaults if ``None``.
    """

    def __init__(
        self, tokenizer: Tokenizer, *, seed: int = 0, config: TextGenConfig | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.config = config or TextGenConfig()
        #: Each named conversation's tool rounds (bounded by ``config.sessions``).
        self.sessions = SessionRounds(self.config.sessions)

    def rng_for(self, prompt_ids: Sequence[int], salt: str = "") -> random.Random:
        """The random source of one request: a function of seed, salt and prompt only."""
        digest = hashlib.blake2b(array("I", prompt_ids).tobytes(), digest_size=16).hexdigest()
        return random.Random(f"{self.seed}|{salt}|{digest}")

    def plan(
        self,
        messages: Sequence[Mapping[str, Any]],
        prompt_ids: Sequence[int],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool = True,
        stop: str | Sequence[str] | None = None,
        salt: str = "",
        tool_rounds: int | None = None,
        session_id: str | None = None,
        max_tokens: int | None = None,
    ) -> OutputPlan:
        """The output of one chat request.

        Args:
            messages: the request's messages (tool rounds are counted from them).
            prompt_ids: the rendered prompt; with seed and salt, it fixes the output.
            tools: the request's OpenAI ``tools``.
            tool_choice: ``None``/``"auto"``, ``"none"``, ``"required"``, or
                ``{"type": "function", "function": {"name": ...}}``.
            parallel_tool_calls: ``False`` limits a tool-calling turn to one call.
            stop: stop string(s) that end a text answer early.
            salt: varies the output between otherwise identical requests (e.g. the
                request's ``seed``).
            tool_rounds: this conversation's tool rounds, instead of the configured number
                (lets one workload mix short and long agents).
            session_id: the conversation's id (the ``X-Session-ID`` header): its rounds
                are counted across its requests, so a compacted history does not reset
                them; ``None`` counts the rounds ``messages`` show.
            max_tokens: the request's output limit (its effective ``max_tokens``): an
                answer is made only as far as the limit cuts it (the tokens sent are the
                same as without it); ``None`` makes the whole answer.
        """
        rng = self.rng_for(prompt_ids, salt)
        rounds = self.config.tool_rounds if tool_rounds is None else tool_rounds
        functions = [t["function"] for t in tools or () if isinstance(t.get("function"), Mapping)]
        forced: Mapping[str, Any] | None = None
        if isinstance(tool_choice, Mapping):
            name = (tool_choice.get("function") or {}).get("name")
            forced = next((f for f in functions if f.get("name") == name), None)
        call = bool(functions) and tool_choice != "none"
        if call and forced is None and tool_choice != "required":
            call = self.sessions.rounds(session_id, messages) < rounds
        if call:
            if forced is not None:
                chosen = [forced]
            else:
                lo, hi = self.config.tool_calls_per_turn
                n = 1 if not parallel_tool_calls else rng.randint(lo, hi)
                chosen = [rng.choice(functions) for _ in range(n)]
            return self._tool_plan(chosen, rng)
        return self._text_plan(rng, stop, max_tokens)

    # --- Plans -----------------------------------------------------------------------

    def _text_plan(
        self, rng: random.Random, stop: str | Sequence[str] | None, max_tokens: int | None
    ) -> OutputPlan:
        lo, hi = self.config.answer_tokens
        target = rng.randint(lo, hi)
        stops = [s for s in ([stop] if isinstance(stop, str) else list(stop or ())) if s]
        stream = _answer_parts(rng, self.config.words)
        parts: list[str] = []
        approx = 0  # the running estimate of the answer's tokens
        # An answer longer than the request's max_tokens is cut there ("length"): only as
        # much of it is made as that cut needs — a --answer-tokens of billions must not
        # build billions of words for a max_tokens of 5 — doubling the estimate until
        # enough is made. The parts come from one stream, so those made are the whole
        # answer's first ones, and the tokens sent are the same as with the whole answer.
        goal = target if max_tokens is None else min(target, 2 * max_tokens + 16)
        while True:
            while approx < goal:
                more, cost = next(stream)
                parts += more
                approx += cost
            if goal == target or self._covers(parts, max_tokens or 0, stops):
                break
            goal = min(target, 2 * goal)
        text = "".join(parts) + "."
        pieces = self.tokenizer.pieces(text)
        if len(pieces) > target:
            text = "".join(pieces[:target])
        if stops:
            cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
            if cuts:
                text = text[: min(cuts)]
        return self._finish(text, content=text, calls=(), spans=(), reason="stop")

    def _covers(self, parts: Sequence[str], max_tokens: int, stops: Sequence[str]) -> bool:
        """Whether an answer begun with ``parts`` is sure to be cut at ``max_tokens``
        tokens, those tokens (and the stop strings' first match within them) the same
        however the answer goes on: more than ``max_tokens + 1`` tokens before the last
        part, then the longest stop string's length of text (a token at the end of what
        is made may still grow with the next part; a stop string may reach across)."""
        pieces = self.tokenizer.pieces("".join(parts[:-1]))[:-1]  # settled: not the last
        if len(pieces) <= max_tokens + 1:
            return False
        tail = sum(len(p) for p in pieces[max_tokens + 1 :])
        return tail >= max((len(s) for s in stops), default=0)

    def _tool_plan(self, chosen: Sequence[Mapping[str, Any]], rng: random.Random) -> OutputPlan:
        calls: list[PlannedToolCall] = []
        for fn in chosen:
            try:
                args = generate_value(fn.get("parameters") or {"type": "object"}, rng)
            except (SchemaError, RecursionError, TypeError, ValueError, ArithmeticError) as exc:
                # A schema no value satisfies (an empty enum, a $ref loop, a minLength
                # that is no number): the request's fault, a 400 as guided decoding gives.
                raise RequestRejected(
                    f"tool {fn.get('name')!r}: its parameters schema admits no arguments "
                    f"the simulator can generate: {type(exc).__name__}: {exc}",
                    status=400,
                    param="tools",
                ) from None
            calls.append(
                PlannedToolCall(
                    id=f"call_{rng.getrandbits(96):024x}",
                    name=str(fn.get("name", "")),
                    arguments=json.dumps(args, ensure_ascii=False),
                )
            )
        text = assistant_body("", [(c.name, c.arguments) for c in calls])
        spans = []
        pos = 0
        for c in calls:
            block = render_tool_call(c.name, c.arguments)
            s0 = text.index(block, pos)
            a0 = s0 + block.rindex(c.arguments)
            spans.append((s0, a0, a0 + len(c.arguments)))
            pos = s0 + len(block)
        return self._finish(
            text, content="", calls=tuple(calls), spans=tuple(spans), reason="tool_calls"
        )

    def _finish(
        self,
        text: str,
        *,
        content: str,
        calls: tuple[PlannedToolCall, ...],
        spans: tuple[tuple[int, int, int], ...],
        reason: Literal["stop", "tool_calls"],
    ) -> OutputPlan:
        pieces = self.tokenizer.pieces(text)
        ids = self.tokenizer.encode(text)
        offsets = [0]
        pos = 0
        for p in pieces:
            pos += len(p)
            offsets.append(pos)
        offsets.append(pos)  # the end token is zero-width
        return OutputPlan(
            token_ids=(*ids, IM_END),
            text=text,
            offsets=tuple(offsets),
            content=content,
            tool_calls=calls,
            finish_reason=reason,
            call_spans=spans,
        )
