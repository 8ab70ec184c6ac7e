"""The simulator's tokenizer: deterministic ids, ~4 characters a token, prefix-stable chat."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.sim import Tokenizer
from agentflow.sim.tokenizer import IM_END, IM_START, VOCAB_SIZE

TOK = Tokenizer()

PROSE = (
    "People who run many autonomous agents at once against a server need one library that "
    "schedules thousands of sessions without overrunning the server or the provider's limits, "
    "and without letting one long agent starve the rest. It keeps every session inside its "
    "context budget, counting tokens offline and correcting the count with what the server "
    "reports. The quick brown fox jumps over the lazy dog, and the dog does not mind at all."
)

_SCRIPT = """
from agentflow.sim import Tokenizer, Engine
t = Tokenizer()
ids = t.encode("Hello, world! The simulator's tokens are stable: 12345 café.")
e = Engine("cpu-tiny", seed=7)
rid = e.add_chat([{"role": "user", "content": "write a haiku"}], max_tokens=40)
e.run_until_idle()
print(ids, e.record(rid).plan.text, e.record(rid).token_times_s)
"""


@given(st.text(max_size=300))
def test_pieces_concatenate_to_the_text(text: str) -> None:
    pieces = TOK.pieces(text)
    assert "".join(pieces) == text
    ids = TOK.encode(text)
    assert len(ids) == len(pieces) == TOK.count(text)
    assert all(16 <= i < VOCAB_SIZE for i in ids)


def test_about_four_characters_a_token_on_english() -> None:
    ratio = len(PROSE) / TOK.count(PROSE)
    assert 3.5 <= ratio <= 4.5, ratio


def test_same_piece_same_id_and_different_pieces_differ() -> None:
    a = TOK.encode(" agent agent")
    assert a[0] == a[1]
    assert len(set(TOK.encode(" alpha beta gamma delta"))) == 4


def test_ids_are_the_same_in_another_process_with_another_hash_seed() -> None:
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True
        )
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("[")


_text = st.text(st.characters(codec="utf-8"), max_size=60)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": _text}
)


@settings(max_examples=60)
@given(
    system=_text,
    history=st.lists(_message, max_size=6),
    more=st.lists(_message, min_size=1, max_size=4),
)
def test_append_only_conversation_extends_the_prompt(
    system: str, history: list[dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    first = [{"role": "system", "content": system}, *history]
    before = TOK.render_chat(first, tools, add_generation_prompt=False)
    after = TOK.render_chat([*first, *more], tools)
    assert after[: len(before)] == before
    assert len(after) > len(before)
    # With the generation prompt, the prefix holds when the assistant speaks next.
    asked = TOK.render_chat(first, tools)
    answered = TOK.render_chat([*first, {"role": "assistant", "content": "ok"}, *more], tools)
    assert answered[: len(asked)] == asked


def test_generation_prompt_is_the_next_assistant_header() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    prompt = TOK.render_chat(msgs)
    header = TOK.encode("assistant\n")
    assert prompt[0] == IM_START and prompt[-len(header) - 1 :] == [IM_START, *header]
    assert prompt[-len(header) - 3] == IM_END
    answered = TOK.render_chat([*msgs, {"role": "assistant", "content": "Hello there."}])
    assert answered[: len(prompt)] == prompt
    assert answered[len(prompt) : len(prompt) + len(TOK.encode("Hello there."))] == TOK.encode(
        "Hello there."
    )


def test_tool_schema_key_order_changes_the_prompt() -> None:
    a = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    b = {"function": {"parameters": {"type": "object"}, "name": "f"}, "type": "function"}
    msgs = [{"role": "user", "content": "go"}]
    assert TOK.render_chat(msgs, [a]) != TOK.render_chat(msgs, [b])
    assert TOK.render_chat(msgs, [a]) == TOK.render_chat(msgs, [dict(a)])


def test_content_parts_render_like_the_joined_text() -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]
    assert TOK.render_chat([{"role": "user", "content": parts}]) == TOK.render_chat(
        [{"role": "user", "content": "one two"}]
    )
