"""The server's own count (``ServerCounter``, its ``POST /tokenize``): vLLM's and
llama.cpp's shapes, special tokens, failures and settings — over real loopback HTTP."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
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
from agentflow.context import ServerCounter, TiktokenCounter
from agentflow.llamacpp import LlamaCppServer, free_port
from agentflow.sim.server import SimServer

from ..sim.simhttp import QUICK
from .test_counting import TEXTS


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
        if kind == "deep":  # msgspec raises RecursionError, not DecodeError, this deep
            n = sys.getrecursionlimit() + 200  # (its limit is the interpreter's)
            return web.Response(body=b'{"tokens": [1], "x": ' + b"[" * n + b"]" * n + b"}")
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
        with pytest.raises(StreamProtocolError, match="nested too deep"):
            await counter.count("deep")
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
    # The one base-URL check the transports use: a port 0, a query string, a newline.
    for bad_url in ("http://h:0", "http://h/?key=k", "http://h\n"):
        with pytest.raises(ConfigError, match=r"ServerCounter\.base_url"):
            ServerCounter(bad_url)
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
