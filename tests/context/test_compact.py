"""Compaction: unit tests on fixed conversations, then end to end on the simulator."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentflow import ConfigError, Fleet
from agentflow.context import MessageCounter, PrefixIndex, TiktokenCounter
from agentflow.context._budget import ContextBudget
from agentflow.context._compact import DEFAULT_SUMMARY_PROMPT, Compact, render_transcript
from agentflow.context._events import CompactionEvent
from agentflow.context._history import check_pairing
from agentflow.context._overflow import Fail

from .budget_util import (
    Completer,
    ReadFile,
    WordEstimator,
    call,
    conversation,
    prompt_tokens,
    sim_agent,
    sim_tokens,
    simulator,
    view,
    words,
)


async def test_compact_puts_the_summary_right_after_the_pinned_prefix() -> None:
    msgs = conversation(5, output_words=40)
    prefix = copy.deepcopy(msgs[:2])
    newest = copy.deepcopy(msgs[-4:])  # the last two units, verbatim
    events: list[object] = []
    completer = Completer("the cache bug is in scale()")
    v = view(msgs, limit=300, window=5000, complete=completer, events=events)
    before = v.tokens()
    assert await Compact()(v)
    assert msgs[:2] == prefix
    assert msgs[2] == {
        "role": "user",
        "content": "Summary of the conversation so far:\nthe cache bug is in scale()",
    }
    assert msgs[3:] == newest
    assert check_pairing(msgs) is None
    # The request: the summariser's prompt, then the transcript of what was replaced.
    (request,) = completer.requests
    assert request.model == "m" and request.params["max_tokens"] == 512
    assert request.messages[0] == {"role": "system", "content": DEFAULT_SUMMARY_PROMPT}
    transcript = request.messages[1]["content"]
    assert "→ calls f({}) as r0-0" in transcript and "[tool result r2-0]" in transcript
    assert "r3-0" not in transcript  # kept verbatim, not summarised
    (event,) = events
    assert isinstance(event, CompactionEvent)
    assert event.messages_summarised == 7 and event.tokens_before == before
    assert event.tokens_after == v.tokens() < before
    assert event.trace.content == "the cache bug is in scale()" and event.model == "m"


async def test_a_second_compaction_summarises_the_first_summary() -> None:
    msgs = conversation(5, output_words=40)
    completer = Completer("first")
    await Compact(keep_last=1)(view(msgs, limit=150, window=5000, complete=completer))
    msgs += conversation(3, output_words=40)[2:]  # more rounds (ids repeat; pairing holds)
    completer.summary = "second"
    assert await Compact(keep_last=1)(view(msgs, limit=150, window=5000, complete=completer))
    assert (
        "Summary of the conversation so far:\nfirst" in completer.requests[1].messages[1]["content"]
    )
    assert msgs[2]["content"].endswith("second") and len(msgs) == 5
    assert check_pairing(msgs) is None


async def test_kept_units_are_bounded_by_keep_fraction_but_one_is_always_kept() -> None:
    msgs = conversation(4, output_words=100)  # each unit ~ 110 tokens
    policy = Compact(keep_last=3, keep_fraction=0.5)
    v = view(msgs, limit=300)
    # 0.5 × 300 = 150 tokens of kept units: only the newest fits.
    assert policy.split(v) == len(msgs) - 2
    v = view(msgs, limit=20)
    assert policy.split(v) == len(msgs) - 2  # larger than the share, kept anyway


async def test_nothing_to_summarise_or_an_empty_summary_changes_nothing() -> None:
    msgs = conversation(1)
    assert not await Compact()(view(msgs, limit=10))
    msgs = conversation(4)
    snapshot = copy.deepcopy(msgs)
    assert not await Compact()(view(msgs, limit=10, complete=Completer("   ")))
    assert msgs == snapshot


async def test_custom_prompt_model_role_and_params() -> None:
    msgs = conversation(4)
    completer = Completer("s")
    policy = Compact(prompt="Summarise.", model="small", role="assistant",
                     params={"temperature": 0}, max_summary_tokens=64)  # fmt: skip
    assert await policy(view(msgs, limit=10, complete=completer))
    (request,) = completer.requests
    assert request.model == "small" and request.messages[0]["content"] == "Summarise."
    assert request.params == {"max_tokens": 64, "temperature": 0}
    assert msgs[2]["role"] == "assistant"


def test_transcript_cuts_long_tool_outputs() -> None:
    msgs = conversation(1, output_words=50)
    text = render_transcript(msgs, WordEstimator(), tool_output_tokens=5)
    assert text.startswith("[system]\nYou are careful.\n\n[user]\nFix the bug")
    assert f"[tool result r0-0]\n{words(5)} […]" in text


async def test_a_transcript_too_long_cuts_tool_results_harder_then_its_start() -> None:
    msgs = conversation(6, output_words=200)
    completer = Completer("s")
    policy = Compact(keep_last=1, tool_output_tokens=1000, max_summary_tokens=50)
    assert await policy(view(msgs, limit=400, window=500, complete=completer))
    transcript = completer.requests[0].messages[1]["content"]
    # (500 − 50) × 0.9 − the prompt's ~60 words: tool results were halved down to 32 tokens.
    assert len(transcript.split()) <= 405 - 60
    assert f"[tool result r0-0]\n{words(32)} […]" in transcript
    assert transcript.startswith("[assistant]\n→ calls f({}) as r0-0")  # nothing lost whole
    policy = Compact(keep_last=1, max_input_tokens=100)
    assert await policy(view(conversation(6, 200), limit=400, complete=completer))
    transcript = completer.requests[1].messages[1]["content"]
    assert transcript.startswith("[… the first ~") and "[tool result r4-0]" in transcript
    assert len(transcript.split()) <= 100 + 15


def _output(turn: int, lines: int = 500) -> str:
    """A distinct tool output (~7,500 tokens)."""
    return "\n".join(
        f"line {turn}-{i}: the value of x{i} is {i * 7919 % 1000}" for i in range(lines)
    )


async def test_a_compaction_tokenizes_only_the_heads_it_keeps(encoded: list[str]) -> None:
    """The transcript's tool results are sized by their messages' counts (taken when they
    were appended) and its length summed from its pieces: tiktoken is never handed a whole
    output, nor the transcript — only the heads kept — and each result is cut exactly."""
    budget = ContextBudget(window=100_000, reserve_output=1000, margin=0, cache_buster=False,
                           overflow=[Compact(), Fail()])  # fmt: skip
    session = budget.bind(session_id="s", agent="a", emit=lambda e: None, model="m")
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Read every file."},
    ]
    completer = Completer("s")
    outputs: list[str] = []
    for turn in range(40):
        seen = len(encoded)
        await session.before_turn(turn, msgs, [], completer)
        if completer.requests:
            break
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call(f"c{turn}")]})
        outputs.append(_output(turn))
        msgs.append({"role": "tool", "tool_call_id": f"c{turn}", "content": outputs[-1]})
    (request,) = completer.requests
    during = [t for t in encoded[seen:] if t != outputs[-1]]  # (the newest is counted)
    assert during and max(map(len, during)) < min(map(len, outputs)) // 2
    transcript = request.messages[1]["content"]
    counter = TiktokenCounter()
    summarised = [o for o in outputs if f"{o[:40]}" in transcript]
    assert len(summarised) >= 5
    for output in summarised:
        start = transcript.index(output[:40])
        head = transcript[start : transcript.index(" […]", start)]
        assert output.startswith(head)
        assert counter.count(head) <= 1024 < counter.count(output[: len(head) + 1])


async def test_compact_needs_a_model() -> None:
    v = view(conversation(4), limit=10)
    v.model = ""
    with pytest.raises(ConfigError, match="no known model to summarise with"):
        await Compact()(v)
    assert await Compact(model="small")(v)


def test_compact_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"Compact\.max_summary_tokens"):
        Compact(max_summary_tokens=0)
    with pytest.raises(ConfigError, match=r"Compact\.keep_fraction"):
        Compact(keep_fraction=1.5)
    with pytest.raises(ConfigError, match=r"Compact\.role"):
        Compact(role="tool")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Compact\.params"):
        Compact(params={"messages": []})
    with pytest.raises(ConfigError, match=r"Compact\.prompt"):
        Compact(prompt=" ")
    with pytest.raises(ConfigError, match=r"Compact\.prompt must be a non-empty string"):
        Compact(prompt=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Compact\.params must be a mapping"):
        Compact(params=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Compact\.summary_prefix"):
        Compact(summary_prefix=1)  # type: ignore[arg-type]


def test_compact_refuses_an_output_size_in_params() -> None:
    # params={"max_tokens": 1024} won over max_summary_tokens=512 in the request while the
    # transcript was sized for 512: the summary request overflowed the window.
    for key in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(ConfigError, match=r"Compact\.params may not set.*max_summary_tokens"):
            Compact(params={key: 1024})
    request_params = Compact(params={"temperature": 0.2}).params
    assert request_params == {"temperature": 0.2}


# --- end to end on the simulator, over real HTTP --------------------------------------------


async def test_a_compacted_session_keeps_its_prefix_cached_and_finishes() -> None:
    window, reserve = 1500, 48
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(window=window, reserve_output=reserve, pin_first=1, counter=counter,
                           overflow=[Compact(max_summary_tokens=48), Fail()])  # fmt: skip
    # Two 500-word files overflow the window at turn 2; then small files, six rounds in all.
    tool = ReadFile([500, 500], 40)
    events: list[Any] = []
    async with simulator() as (sim, transport):
        agent = sim_agent([budget, PrefixIndex(counter)], tool, rounds=6)
        fleet = Fleet(transport, callbacks=[events.append])
        result = await fleet.run([agent.session("Fix the bug in cache.py")])
        session = result.sessions[0]
        # The pinned prefix (system prompt with the tools, then the task) as the sim counts it.
        prefix = await sim_tokens(sim, session.messages[:2], agent.tool_specs)
    assert session.status == "completed", session.error
    (compaction,) = [e for e in events if isinstance(e, CompactionEvent)]
    turn = compaction.turn
    assert compaction.tokens_after < compaction.tokens_before
    assert compaction.trace.usage is not None and compaction.trace.content
    # The summary sits right after the untouched prefix; the pairing stayed valid.
    assert session.messages[2]["content"].startswith("Summary of the conversation so far:\n")
    assert session.messages[2]["content"].endswith(compaction.trace.content.strip())
    assert check_pairing(session.messages) is None
    # The session went on calling tools after the compaction, then answered.
    assert all(t.trace.tool_calls for t in session.turns[turn:-1]) and len(session.turns) > turn + 2
    assert not session.turns[-1].trace.tool_calls
    # The prefix kept hitting the cache: on the compacted turn every full block of it (the
    # cache serves whole 16-token blocks; the summary after it is new), on later turns all.
    cached = [t.trace.usage.cached_tokens or 0 for t in session.turns if t.trace.usage]
    assert cached[turn] >= prefix - prefix % 16 > 0
    assert all(c >= prefix for c in cached[turn + 1 :])
    assert max(prompt_tokens(session)) <= window - reserve
    # The client's fingerprints agree: the compacted turn could reuse the whole pinned prefix
    # (its full blocks, in local tokens), and nothing of the summary after it; reported in
    # the server's tokens, by the ratio of the previous prompt and reply (which the prefix
    # is part of), as the server counted them.
    local = counter.count_tools(agent.tool_specs) + sum(
        counter.count_message(m) for m in session.messages[:2]
    )
    p, prev = session.turns[turn].prompt, session.turns[turn - 1]
    assert p is not None and p.max_cacheable_tokens is not None
    assert prev.prompt is not None and prev.trace.usage is not None
    local_seq = (prev.prompt.raw_estimate - counter.reply_priming
                 + counter.count_message(prev.trace.assistant_message()))  # fmt: skip
    server_seq = (prev.trace.usage.prompt_tokens or 0) + (prev.trace.usage.completion_tokens or 0)
    assert p.max_cacheable_tokens == round((local - local % 16) * server_seq / local_seq)
