"""Helpers for the budget tests: fixed conversations and a word-counting estimator."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp

from agentflow import Agent, HTTPTransport, SessionResult, Tool, TurnTrace, Usage
from agentflow.context import ContextBudget, ContextChain, SessionBudget
from agentflow.context._overflow import OverflowView
from agentflow.sim import get_profile
from agentflow.sim.server import SimServer
from agentflow.sim.textgen import DEFAULT_WORDS, TextGenConfig
from agentflow.transport import ChatRequest


class WordEstimator:
    """One token per word; 4 per message, 3 per tool call, 3 per prompt: easy to reckon."""

    def __init__(self) -> None:
        self.message_calls = 0

    def text(self, text: str) -> int:
        return len(text.split())

    def message(self, message: Mapping[str, Any]) -> int:
        self.message_calls += 1
        n = 4 + self.text(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            n += 3 + self.text(call["function"]["arguments"])
        return n

    def prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        return 3 + sum(self.message(m) for m in messages) + 10 * len(tools)

    def cut(self, text: str, max_tokens: int) -> str:
        return " ".join(text.split()[:max_tokens])


def words(n: int, word: str = "w") -> str:
    """``n`` words."""
    return " ".join(f"{word}{i}" for i in range(n))


def call(call_id: str, args: str = "{}") -> dict[str, Any]:
    """An OpenAI tool call."""
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": args}}


def tool_round(prefix: str, n_calls: int, output_words: int) -> list[dict[str, Any]]:
    """An assistant message calling ``n_calls`` tools, then their results."""
    ids = [f"{prefix}-{i}" for i in range(n_calls)]
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}
    ]
    msgs += [{"role": "tool", "tool_call_id": i, "content": words(output_words)} for i in ids]
    return msgs


def conversation(rounds: int, output_words: int = 50) -> list[dict[str, Any]]:
    """System, task, then ``rounds`` tool rounds (one with two calls)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Fix the bug in cache.py please."},
    ]
    for r in range(rounds):
        msgs += tool_round(f"r{r}", 2 if r == 1 else 1, output_words)
    return msgs


def trace(content: str = "", *, prompt: int | None = None, cached: int | None = None,
          output: int | None = None, model: str = "m") -> TurnTrace:  # fmt: skip
    """A finished turn's trace with the given usage."""
    usage = (
        Usage(prompt_tokens=prompt, completion_tokens=output, cached_tokens=cached)
        if prompt is not None or output is not None
        else None
    )
    return TurnTrace(
        endpoint="test", model=model, response_id="r", sent_ns=0, headers_ns=1, end_ns=2,
        chunk_ns=(1,), chunk_chars=(len(content),), chunk_tokens=(max(1, len(content.split())),),
        tokens_exact=False, n_events=2, content=content, reasoning="", tool_calls=(),
        finish_reason="stop", usage=usage, done=True,
    )  # fmt: skip


class Completer:
    """A ``complete`` that answers every request with a fixed summary and keeps them."""

    def __init__(self, summary: str = "they fixed the cache bug") -> None:
        self.summary = summary
        self.requests: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest) -> TurnTrace:
        self.requests.append(request)
        return trace(self.summary, prompt=100, output=len(self.summary.split()))


def view(
    messages: list[dict[str, Any]],
    *,
    limit: int,
    pinned: int = 2,
    window: int | None = None,
    complete: Completer | None = None,
    events: list[Any] | None = None,
) -> OverflowView:
    """An overflow view over ``messages`` with the word estimator."""
    sink = events if events is not None else []
    return OverflowView(
        session_id="s-1",
        agent="a",
        model="m",
        turn=3,
        messages=messages,
        pinned=pinned,
        tools=(),
        limit=limit,
        window=window if window is not None else limit + 100,
        complete=complete or Completer(),
        estimator=WordEstimator(),
        emit=sink.append,
    )


# --- the simulator over real HTTP ---------------------------------------------------------

#: A fast simulated deployment: 1 ms steps, a 4096-token model limit, room for 1M KV tokens
#: (so nothing a test sends is evicted from the prefix cache).
SIM_PROFILE = dataclasses.replace(
    get_profile("cpu-tiny"),
    name="test-budget",
    model="budget-sim",
    kv_capacity_tokens=1 << 20,
    max_num_seqs=64,
    max_model_len=4096,
    max_num_batched_tokens=8192,
    per_agent_tps=1000.0,
    decode_per_seq_s=1e-6,
    decode_per_ctx_token_s=0.0,
)

INSTRUCTIONS = (
    "You are a careful engineer. You read files before you change them, you run the "
    "tests after every change, and you report what you found in a few short lines."
)


#: Long words: cl100k spends one token on most, the simulator one per five letters.
LONG_WORDS = tuple(
    "configuration implementation performance throughput scheduling preemption "
    "calibration concurrency allocation invalidation serialization deterministic".split()
)


def prose(n_words: int, start: int = 0, vocab: Sequence[str] = DEFAULT_WORDS) -> str:
    """``n_words`` of a vocabulary (by default the simulator's short words, on which
    both tokenizers roughly agree)."""
    return " ".join(vocab[(start + 7 * i) % len(vocab)] for i in range(n_words))


class ReadFile:
    """A ``read_file`` tool whose output size is set per call, in words."""

    def __init__(
        self, sizes: Sequence[int], default: int, vocab: Sequence[str] = DEFAULT_WORDS
    ) -> None:
        self.sizes = list(sizes)
        self.default = default
        self.vocab = vocab
        self.calls = 0

    def __call__(self, path: str) -> str:
        """Read a file of the repository.

        Args:
            path: the file's path.
        """
        n = self.sizes[self.calls] if self.calls < len(self.sizes) else self.default
        self.calls += 1
        return prose(n, start=self.calls, vocab=self.vocab)


def sim_agent(
    context: Any, tool: Any, *, rounds: int, max_turns: int = 30, name: str = "coder",
) -> Agent:  # fmt: skip
    """An agent whose sessions the simulator answers with ``rounds`` tool rounds."""
    return Agent(
        name=name,
        model=SIM_PROFILE.model,
        instructions=INSTRUCTIONS,
        tools=[Tool.from_function(tool.__call__, name="read_file", in_thread=False)],
        params={"max_tokens": 48, "agentflow_tool_rounds": rounds},
        max_turns=max_turns,
        context=context,
    )


@contextlib.asynccontextmanager
async def simulator() -> AsyncIterator[tuple[SimServer, HTTPTransport]]:
    """The simulator on loopback (short answers, fast steps) and a transport to it."""
    textgen = TextGenConfig(answer_tokens=(8, 24))
    async with (
        SimServer(SIM_PROFILE, time_scale=0.05, textgen=textgen) as sim,
        HTTPTransport(sim.base_url) as transport,
    ):
        yield sim, transport


async def sim_tokens(
    sim: SimServer, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> int:
    """The simulator's own count (``POST /tokenize``) of a prompt prefix, no generation prompt."""
    body = {"messages": list(messages), "tools": list(tools), "add_generation_prompt": False}
    async with aiohttp.ClientSession() as s, s.post(f"{sim.url}/tokenize", json=body) as r:
        assert r.status == 200
        answer = await r.json()
    count: int = answer["count"]
    return count


def prompt_tokens(result: SessionResult) -> list[int]:
    """Every turn's reported prompt size."""
    out = []
    for t in result.turns:
        assert t.trace.usage is not None and t.trace.usage.prompt_tokens is not None
        out.append(t.trace.usage.prompt_tokens)
    return out


def bind_indexed(
    budget: ContextBudget, index: Any, *, emit: Any = None, session_id: str = "s-1", **kw: Any
) -> tuple[Any, SessionBudget]:
    """Bind ``[budget, index]`` (a prefix index link after the budget) for one session, as
    an agent binds its context: the chain's session (run it) and the budget's (read its
    counts). Checks that the chain bound what the deprecated ``ContextBudget(prefix_index=
    index).bind()`` did: the budget's session, fingerprinting in ``index`` (the index
    link's own session does nothing but hand the index over)."""
    ctx: Any = ContextChain([budget, index]).bind(
        session_id=session_id, agent="a", emit=emit if emit is not None else (lambda e: None), **kw
    )
    budget_ctx, index_ctx = ctx._sessions
    assert isinstance(budget_ctx, SessionBudget) and budget_ctx.budget is budget
    assert budget_ctx._tracker is not None  # fingerprinting, in the index given
    assert type(index_ctx).__name__ == "_PrefixJoin" and index_ctx._index is index
    return ctx, budget_ctx
