"""Token counting: shipped encodings (offline), the HF counter, chat messages (the server's
counter: test_server_counter.py)."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from agentflow import ConfigError
from agentflow.context import (
    ENCODING_NAMES,
    ENCODINGS_DIR,
    ChangeCheck,
    HFTokenizerCounter,
    MessageCounter,
    TiktokenCounter,
    TokenCounter,
    encoding,
    encoding_name_for_model,
)
from agentflow.context._messages import IMAGE_TOKEN, MESSAGE_TOKEN, NAME_TOKEN
from agentflow.llamacpp import free_port

from .hf_tokenizer import CORPUS, SPECIAL

#: tiktoken's own encoding constructors (the package has no type information).
openai_public = importlib.import_module("tiktoken_ext.openai_public")

#: Fixed strings: ASCII, code, numbers, whitespace runs, CJK, emoji, special-token text.
TEXTS = [
    "",
    "hello world",
    "tiktoken is great!",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "Numbers: 1234567890 3.14159 -42 1e10",
    "   leading and trailing spaces   ",
    "日本語のテキストと中文文本",
    "emoji 🎉🚀 and accents: café naïve",
    "<|endoftext|> is text here, not a special token",
]

#: tiktoken's published ids (its README; OpenAI's cookbook) — fixed forever.
KNOWN = {
    ("cl100k_base", "hello world"): [15339, 1917],
    ("cl100k_base", "tiktoken is great!"): [83, 1609, 5963, 374, 2294, 0],
    ("o200k_base", "hello world"): [24912, 2375],
}


def _tiktoken_reference(monkeypatch: pytest.MonkeyPatch, name: str) -> tiktoken.Encoding:
    """tiktoken's own encoding, built by tiktoken_ext from the shipped cache files."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(ENCODINGS_DIR))
    return tiktoken.get_encoding(name)


# --- shipped encodings ----------------------------------------------------------------


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_shipped_files_match_tiktokens_expected_hashes(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The files are named as tiktoken's cache names them and hash as it expects; the
    split regex and special tokens are tiktoken_ext's own."""
    seen: dict[str, str] = {}

    def capture(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        assert expected_hash is not None
        seen[url] = expected_hash
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", capture)
    ctor: Callable[[], dict[str, Any]] = getattr(openai_public, name)
    spec = ctor()
    ((url, expected),) = seen.items()
    path = ENCODINGS_DIR / hashlib.sha1(url.encode()).hexdigest()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected
    enc = encoding(name)
    assert enc.name == name
    assert enc._pat_str == spec["pat_str"]
    assert enc._special_tokens == spec["special_tokens"]


def test_the_issue_names_the_same_files() -> None:
    assert sorted(p.name for p in ENCODINGS_DIR.iterdir()) == [
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "fb374d419588a4632f3f557e76b4b70aebbca790",
    ]


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_counts_equal_tiktokens(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    ref = _tiktoken_reference(monkeypatch, name)
    counter = TiktokenCounter(name)
    for text in TEXTS:
        assert counter.encode(text) == ref.encode_ordinary(text), text
        assert counter.count(text) == len(ref.encode_ordinary(text))
    for (enc_name, text), ids in KNOWN.items():
        if enc_name == name:
            assert counter.encode(text) == ids
    assert encoding(name) is encoding(name)  # built once


def test_unknown_encoding_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="r50k_base"):
        encoding("r50k_base")
    with pytest.raises(ConfigError, match="encoding name must be one of"):
        encoding(["cl100k_base"])  # type: ignore[arg-type]
    for bad in ("nope", None, ["x"]):  # an unhashable one was a bare TypeError
        with pytest.raises(ConfigError, match=r"TiktokenCounter\.encoding_name must be one of"):
            TiktokenCounter(bad)  # type: ignore[arg-type]


def test_encoding_for_models() -> None:
    assert encoding_name_for_model("gpt-4o-mini") == "o200k_base"
    assert encoding_name_for_model("gpt-4") == "cl100k_base"
    assert encoding_name_for_model("text-davinci-003") == "cl100k_base"  # p50k: not shipped
    assert encoding_name_for_model("smollm2") == "cl100k_base"


def test_encoding_for_prefixed_and_harmony_models() -> None:
    # "openai/gpt-4o" was cl100k_base while window_for stripped the prefix; gpt-oss is
    # o200k_harmony in tiktoken (o200k_base's ranks), not cl100k_base.
    assert encoding_name_for_model("openai/gpt-4o") == "o200k_base"
    assert encoding_name_for_model("azure/openai/gpt-4o-mini") == "o200k_base"
    assert encoding_name_for_model("gpt-oss-120b") == "o200k_base"
    assert encoding_name_for_model("openai/gpt-oss-20b") == "o200k_base"
    assert encoding_name_for_model("hf/smollm2") == "cl100k_base"


_OFFLINE_SCRIPT = """
import json, sys
from agentflow.context import ENCODING_NAMES, TiktokenCounter
texts = json.loads(sys.argv[1])
counts = {n: [TiktokenCounter(n).encode(t) for t in texts] for n in ENCODING_NAMES}
import tiktoken
try:
    tiktoken.get_encoding("r50k_base")  # not shipped: would need the network
    blocked = False
except Exception as exc:
    blocked = type(exc).__name__
print(json.dumps({"counts": counts, "blocked": blocked}))
"""


def test_counts_offline_in_a_fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No cache, no network: the shipped files are enough, and nothing is written."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.pop("DATA_GYM_CACHE_DIR", None)
    env.update(
        TIKTOKEN_CACHE_DIR=str(cache),
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        http_proxy=dead,
        https_proxy=dead,
        ALL_PROXY=dead,
    )
    proc = subprocess.run(
        [sys.executable, "-c", _OFFLINE_SCRIPT, json.dumps(TEXTS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["blocked"], "the network was reachable: the test proves nothing"
    assert list(cache.iterdir()) == []
    for name in ENCODING_NAMES:
        ref = _tiktoken_reference(monkeypatch, name)
        assert out["counts"][name] == [ref.encode_ordinary(t) for t in TEXTS]


# --- Hugging Face tokenizer.json --------------------------------------------------------


def test_hf_counter_counts_with_the_tokenizer(tokenizer_json: Path) -> None:
    import tokenizers

    counter = HFTokenizerCounter.from_file(tokenizer_json)
    assert isinstance(counter, TokenCounter)
    ref = tokenizers.Tokenizer.from_file(str(tokenizer_json))
    for text in [*CORPUS[:3], "the fox counts tokens", ""]:
        ids = ref.encode(text, add_special_tokens=False).ids
        assert counter.encode(text) == ids
        assert counter.count(text) == len(ids)
    # Merges were learnt: a frequent word is one token, a rare string several.
    assert counter.count("tokens") == 1
    assert counter.count("the quick brown fox") < len("the quick brown fox")
    assert counter.name == f"hf:{tokenizer_json.parent.name}"


def test_hf_counter_counts_special_token_text_as_ordinary_text(byte_level_json: Path) -> None:
    # "<|endoftext|>" in a message was one special token to HFTokenizerCounter, while the
    # docs (and TiktokenCounter) count it as the text it is.
    import tokenizers

    ref = tokenizers.Tokenizer.from_file(str(byte_level_json))
    special_ids = {ref.token_to_id(s) for s in SPECIAL}
    for counter in (HFTokenizerCounter.from_file(byte_level_json), HFTokenizerCounter(ref)):
        for special in SPECIAL:
            ids = counter.encode(f"say {special} now")
            assert not special_ids.intersection(ids)
            assert counter.count(special) > 1
    # A tokenizer handed in is not changed: the counter works on a copy.
    given = tokenizers.Tokenizer.from_file(str(byte_level_json))
    HFTokenizerCounter(given)
    assert len(given.encode("<|endoftext|>", add_special_tokens=False).ids) == 1


def test_hf_counter_rejects_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    with pytest.raises(ConfigError, match=r"tokenizer\.json"):
        HFTokenizerCounter.from_file(bad)


def test_hf_counter_without_tokenizers_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tokenizer_json: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError, match=r"agentflow\[hf\]"):
        HFTokenizerCounter.from_file(tokenizer_json)


# --- chat messages -----------------------------------------------------------------------


def _cookbook_count(messages: list[dict[str, Any]]) -> int:
    """OpenAI cookbook's num_tokens_from_messages for gpt-4 (3 per message, 1 per name)."""
    enc = encoding("cl100k_base")
    n = 3
    for m in messages:
        n += 3
        for key, value in m.items():
            n += len(enc.encode(value))
            if key == "name":
                n += 1
    return n


CHAT = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive revenue."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean."},
]


def test_message_counter_matches_openais_cookbook() -> None:
    mc = MessageCounter(TiktokenCounter())
    assert mc.count_prompt(CHAT) == _cookbook_count(CHAT)


def test_message_parts_tool_calls_and_tools_are_counted() -> None:
    tc = TiktokenCounter()
    mc = MessageCounter(tc, per_message=4, per_name=2, reply_priming=5, per_image=10)
    parts = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": " this picture?"},
        ],
    }
    ids = mc.render(parts)
    assert ids.count(MESSAGE_TOKEN) == 4 and ids.count(IMAGE_TOKEN) == 10
    assert mc.count_message(parts) == 4 + 1 + tc.count("What is in") + 10 + tc.count(
        " this picture?"
    )
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p":1}'}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": {"d": "."}}},
        ],
    }
    assert mc.count_message(call) == 4 + tc.count("assistant") + tc.count("read") + tc.count(
        '{"p":1}'
    ) + tc.count("ls") + tc.count('{"d": "."}')
    result = {"role": "tool", "tool_call_id": "c1", "content": "file contents"}
    assert mc.count_message(result) == 4 + tc.count("tool") + tc.count("file contents")
    named = {"role": "user", "name": "ann", "content": "hi"}
    assert mc.render(named).count(NAME_TOKEN) == 2
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    tools_json = json.dumps(tools[0])
    assert mc.count_tools(tools) == tc.count(tools_json)
    assert mc.count_tools([]) == 0
    msgs: list[dict[str, Any]] = [parts, call, result]
    assert (
        mc.count_prompt(msgs, tools) == sum(map(mc.count_message, msgs)) + tc.count(tools_json) + 5
    )


def test_message_cache_is_keyed_by_content_and_bounded() -> None:
    mc = MessageCounter(TiktokenCounter(), cache_size=3)
    a = {"role": "user", "content": "alpha beta"}
    first = mc.count_message(a)
    assert mc.count_message(dict(a)) == first and mc.hits == 1  # equal content: a hit
    a["content"] = "alpha beta gamma delta"  # edited in place: a new key
    assert mc.count_message(a) > first and mc.misses == 2
    parts: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": "x"}]}
    n = mc.count_message(parts)
    parts["content"][0]["text"] = "x y z w"  # nested edit
    assert mc.count_message(parts) > n
    for i in range(10):
        mc.count_message({"role": "user", "content": f"m{i}"})
    assert len(mc._counts) == 3


def test_message_counter_config_errors() -> None:
    with pytest.raises(ConfigError, match="per_message"):
        MessageCounter(TiktokenCounter(), per_message=-1)
    with pytest.raises(ConfigError, match="cache_size"):
        MessageCounter(TiktokenCounter(), cache_size=0)


def test_prompt_counter_counts_only_what_changed() -> None:
    mc = MessageCounter(TiktokenCounter())
    pc = mc.session()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    msgs: list[dict[str, Any]] = [dict(m) for m in CHAT]
    assert pc.count(msgs, tools) == mc.count_prompt(msgs, tools)
    assert pc.first_changed == 0 and len(pc) == 4
    misses = mc.misses
    msgs.append({"role": "assistant", "content": "Sure."})
    assert pc.count(msgs, tools) == mc.count_prompt(msgs, tools)
    assert pc.first_changed == 4
    assert mc.misses == misses + 1  # only the new message was tokenized
    # Nothing changed: nothing counted.
    assert pc.count(msgs, tools) == pc.tokens and pc.first_changed == 5
    # An old message replaced is found, and counting restarts there.
    msgs[1] = {**msgs[1], "content": "Edited."}
    assert pc.count(msgs, tools) == mc.count_prompt(msgs, tools) and pc.first_changed == 1
    # Compaction: messages replaced and removed.
    msgs[2:4] = [{"role": "user", "content": "Summary of earlier turns."}]
    assert pc.count(msgs, tools) == mc.count_prompt(msgs, tools) and pc.first_changed == 2
    assert pc.message_counts() == [mc.count_message(m) for m in msgs]
    # Tool calls.
    msgs.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    )
    assert pc.count(msgs, tools) == mc.count_prompt(msgs, tools) and pc.first_changed == 4
    # Tools changed; everything dropped.
    assert pc.count(msgs, []) == mc.count_prompt(msgs, [])
    assert pc.count([], []) == mc.reply_priming and pc.first_changed == 0


def _tool_call_message() -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


@pytest.mark.parametrize(
    ("check", "sees_assignment", "sees_nested_edit"),
    [("identity", False, False), ("values", True, False), ("deep", True, True)],
)
def test_what_each_change_check_sees(
    check: ChangeCheck, sees_assignment: bool, sees_nested_edit: bool
) -> None:
    """Replacing a message is always seen; assigning a field from "values" on; an edit
    inside a nested list only with "deep"."""
    mc = MessageCounter(TiktokenCounter())
    pc = mc.session(check=check)
    assert pc.check == check
    msgs = [{"role": "user", "content": "hello"}, _tool_call_message()]
    pc.count(msgs)
    msgs[0] = {"role": "user", "content": "hello there, replaced"}
    assert pc.count(msgs) == mc.count_prompt(msgs) and pc.first_changed == 0
    msgs[0]["content"] = "assigned in place, a longer text than before"
    seen = pc.count(msgs) == mc.count_prompt(msgs)
    assert seen is sees_assignment and pc.first_changed == (0 if sees_assignment else 2)
    pc = mc.session(check=check)
    pc.count(msgs)
    msgs[1]["tool_calls"][0]["function"]["arguments"] = '{"a": "much longer arguments"}'
    seen = pc.count(msgs) == mc.count_prompt(msgs)
    assert seen is sees_nested_edit and pc.first_changed == (1 if sees_nested_edit else 2)


def test_unknown_change_check_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="check"):
        MessageCounter(TiktokenCounter()).session(check="hash")  # type: ignore[arg-type]


def test_changes_are_kept_for_one_follower() -> None:
    mc = MessageCounter(TiktokenCounter())
    pc = mc.session()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    pc.count(msgs)
    assert pc.take_changes() == -1  # the first call: everything (and the tools) is new
    msgs.append({"role": "user", "content": "m5"})
    pc.count(msgs)
    msgs[2] = {"role": "user", "content": "edited"}
    pc.count(msgs)
    msgs.append({"role": "user", "content": "m6"})
    pc.count(msgs)
    assert pc.generation == 4
    assert pc.take_changes() == 2  # the lowest change over the three counts
    assert pc.take_changes() == 7  # nothing since
    pc.count(msgs, [{"type": "function", "function": {"name": "f"}}])
    assert pc.take_changes() == -1 and pc.tools == [{"type": "function", "function": {"name": "f"}}]


def test_hf_counter_takes_a_tokenizer_it_cannot_copy(byte_level_json: Path) -> None:
    # A custom Python pre-tokenizer cannot be serialized, so copying the tokenizer (to set
    # encode_special_tokens on the copy) raised a plain Exception: a tokenizer accepted
    # before was refused. It is used as it is, unchanged.
    import tokenizers
    from tokenizers import pre_tokenizers

    class Whole:
        def pre_tokenize(self, pretok: Any) -> None:
            pretok.split(lambda _i, piece: [piece])

    given = tokenizers.Tokenizer.from_file(str(byte_level_json))
    given.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(Whole())
    counter = HFTokenizerCounter(given)
    ids = given.encode("the fox counts tokens", add_special_tokens=False).ids
    assert counter.encode("the fox counts tokens") == ids
    assert counter.count("the fox counts tokens") == len(ids) > 1
    assert not given.encode_special_tokens  # not changed
    # Special-token text is then the tokenizer's: one token, unless the user opts in.
    assert counter.count(SPECIAL[0]) == 1
    given.encode_special_tokens = True
    assert HFTokenizerCounter(given).count(SPECIAL[0]) > 1
