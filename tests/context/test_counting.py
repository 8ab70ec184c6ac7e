"""Token counting: shipped encodings (offline), HF and server counters, chat messages."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import tiktoken
from aiohttp import web

from agentflow import (
    APIStatusError,
    BadRequestError,
    ConfigError,
    ConnectError,
    ServerError,
    StreamProtocolError,
    StreamTimeout,
)
from agentflow.context import (
    ENCODING_NAMES,
    ENCODINGS_DIR,
    ChangeCheck,
    HFTokenizerCounter,
    MessageCounter,
    ServerCounter,
    TiktokenCounter,
    TokenCounter,
    encoding,
    encoding_name_for_model,
)
from agentflow.context._messages import IMAGE_TOKEN, MESSAGE_TOKEN, NAME_TOKEN
from agentflow.llamacpp import LlamaCppServer, free_port
from agentflow.sim.server import SimServer

from ..sim.simhttp import QUICK
from .hf_tokenizer import CORPUS

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


# --- the server's /tokenize ---------------------------------------------------------------


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(QUICK, seed=3) as server:
        yield server


async def test_server_counter_on_the_simulator(sim: SimServer) -> None:
    """vLLM's dialect over real HTTP; the base URL may carry /v1."""
    counter = ServerCounter(sim.base_url, model=sim.model)
    try:
        for text in TEXTS:
            assert await counter.encode(text) == sim.engine.tokenizer.encode(text)
        assert counter.dialect == "vllm"
        assert await counter.count_many(["hello world", "a b c"]) == [
            len(sim.engine.tokenizer.encode("hello world")),
            len(sim.engine.tokenizer.encode("a b c")),
        ]
    finally:
        await counter.aclose()
        await counter.aclose()


async def _serve(handler: Callable[[web.Request], Any]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/tokenize", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def test_server_counter_detects_llamacpps_shape() -> None:
    """An answer without ``count`` switches to llama.cpp's ``{"content"}`` request."""
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        words = body.get("content", "").split()
        return web.json_response({"tokens": list(range(len(words)))})

    runner, url = await _serve(handler)
    async with aiohttp.ClientSession() as session:
        counter = ServerCounter(url, session=session)
        try:
            assert await counter.count("one two three") == 3
            assert counter.dialect == "llamacpp"
            assert await counter.count("four five") == 2
        finally:
            await counter.aclose()
        assert not session.closed  # not ours to close
    await runner.cleanup()
    assert bodies == [
        {"prompt": "one two three", "add_special_tokens": False},
        {"content": "one two three", "add_special": False},
        {"content": "four five", "add_special": False},
    ]


#: The id a server puts first when it adds special tokens.
BOS = 1


async def test_server_counter_asks_each_server_for_no_bos() -> None:
    """What each server's /tokenize does with special tokens: vLLM adds a BOS unless
    ``add_special_tokens`` is false (its default is true), llama.cpp only when
    ``add_special`` is true. The counter's count is the text's alone on both."""

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        if "prompt" in body:  # vLLM's TokenizeCompletionRequest
            ids = [10 + i for i, _ in enumerate(body["prompt"].split())]
            if body.get("add_special_tokens", True):
                ids.insert(0, BOS)
            return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": 99})
        ids = [10 + i for i, _ in enumerate(body["content"].split())]  # llama.cpp's
        if body.get("add_special", False):
            ids.insert(0, BOS)
        return web.json_response({"tokens": ids})

    runner, url = await _serve(handler)
    vllm, llamacpp = ServerCounter(url, model="m"), ServerCounter(url, dialect="llamacpp")
    try:
        assert await vllm.encode("one two three") == [10, 11, 12]
        assert vllm.dialect == "vllm"
        assert await llamacpp.count("one two three") == 3
    finally:
        await vllm.aclose()
        await llamacpp.aclose()
        await runner.cleanup()


async def test_server_counter_wire_failures_are_transport_errors() -> None:
    async def handler(request: web.Request) -> web.Response:
        kind = (await request.json())["prompt"]
        if kind == "400":
            return web.json_response({"error": {"message": "bad prompt"}}, status=400)
        if kind == "500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if kind == "junk":
            return web.Response(body=b"<html>not json</html>")
        await asyncio.sleep(5)
        return web.json_response({"tokens": []})

    runner, url = await _serve(handler)
    counter = ServerCounter(url)
    # Only the answer that never comes meets the short limit: the others may take as long
    # as a loaded machine makes them.
    impatient = ServerCounter(url, timeout_s=0.3)
    try:
        with pytest.raises(BadRequestError, match="bad prompt") as bad:
            await counter.count("400")
        assert bad.value.status == 400 and bad.value.endpoint == url
        with pytest.raises(ServerError) as err:
            await counter.count("500")
        assert isinstance(err.value, APIStatusError) and err.value.status == 500
        with pytest.raises(StreamProtocolError, match="not a /tokenize answer"):
            await counter.count("junk")
        with pytest.raises(StreamTimeout) as slow:
            await impatient.count("slow")
        assert slow.value.phase == "total" and slow.value.timeout_s == 0.3
    finally:
        await counter.aclose()
        await impatient.aclose()
        await runner.cleanup()
    nobody = ServerCounter(f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ConnectError):
            await nobody.count("x")
    finally:
        await nobody.aclose()


def test_server_counter_config_errors() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        ServerCounter("localhost:8000")
    with pytest.raises(ConfigError, match="dialect"):
        ServerCounter("http://h", dialect="tgi")  # type: ignore[arg-type]
    for bad in (0, -1, float("inf"), float("nan"), "5", None, True):
        with pytest.raises(ConfigError, match=r"ServerCounter\.timeout_s must be a finite number"):
            ServerCounter("http://h", timeout_s=bad)  # type: ignore[arg-type]
    assert ServerCounter("http://h", timeout_s=2)._timeout_s == 2.0
    assert ServerCounter("http://h:1/v1/").url == "http://h:1/tokenize"


@pytest.mark.llamacpp
async def test_server_counter_on_llamacpp(llamacpp: LlamaCppServer) -> None:
    counter = ServerCounter(llamacpp.base_url)
    try:
        counts = await counter.count_many(["hello world", "The quick brown fox.", ""])
        assert counter.dialect == "llamacpp"
        assert counts[0] >= 2 and counts[1] >= 4 and counts[2] == 0
        # SmolLM2's tokenizer is not cl100k: the ids differ.
        assert await counter.encode("hello world") != TiktokenCounter().encode("hello world")
    finally:
        await counter.aclose()


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
