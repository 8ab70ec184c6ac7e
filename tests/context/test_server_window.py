"""The budget's window comes from the server when the server says it (one number per
deployment), from the model table otherwise; every read has a finite limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from agentflow import ConfigError, ConnectError, Endpoint, HTTPTransport, StreamTimeout
from agentflow.context import KNOWN_WINDOWS, ContextBudget, server_window, window_for
from agentflow.embedded import SimTransport
from agentflow.llamacpp import free_port
from agentflow.planner import DEPLOYMENTS, get_deployment
from agentflow.sim import Engine, get_profile
from agentflow.sim.driver import EngineDriver
from agentflow.sim.server import SimServer


def test_one_number_per_deployment() -> None:
    """The report's command says --max-model-len 1000000: the planner, the simulator and the
    window table all say 1,000,000 (the 1,048,576 of a "1M" model card is gone)."""
    flash = get_deployment("deepseek-v4.1-flash-gb300")
    assert flash.context_limit == 1_000_000
    assert get_profile("deepseek-v4.1-flash-gb300").max_model_len == 1_000_000
    assert window_for("deepseek-v4.1-flash") == 1_000_000
    assert 1_048_576 not in KNOWN_WINDOWS.values()
    for d in DEPLOYMENTS.values():
        assert window_for(d.model.name) == d.context_limit, d.name
    for name in ("deepseek-v4.1-flash-gb300", "deepseek-v4-gb300"):
        assert get_profile(name).max_model_len == get_deployment(name).context_limit
    qwen = get_deployment("qwen2.5-coder-32b-gb300-tp8")
    assert get_profile("qwen2.5-coder-32b").max_model_len == qwen.context_limit


async def test_from_server_reads_vllms_max_model_len_over_http() -> None:
    """The simulator serves the deployment's /v1/models, vLLM's shape."""
    profile = get_profile("deepseek-v4.1-flash-gb300")
    async with SimServer(profile) as sim, HTTPTransport(sim.base_url) as transport:
        budget = await ContextBudget.from_server(transport, reserve_output=1024, margin=0)
        by_url = await server_window(sim.base_url)
    assert budget.window == 1_000_000
    assert budget.window_source == f"server {sim.base_url} max_model_len"
    assert by_url is not None and (by_url.tokens, by_url.field) == (1_000_000, "max_model_len")
    assert by_url.model == sim.model
    limit = budget.bind(session_id="s", agent="a", emit=lambda e: None).limit
    assert limit == 1_000_000 - 1024


async def test_from_server_on_the_embedded_simulator() -> None:
    transport = SimTransport(EngineDriver(Engine("deepseek-v4-gb300")))
    try:
        budget = await ContextBudget.from_server(transport)
    finally:
        await transport.aclose()
    assert budget.window == 131_072 and budget.window_source.startswith("server sim://")


@asynccontextmanager
async def serve(routes: dict[str, Callable[[web.Request], Any]]) -> AsyncIterator[str]:
    """A small aiohttp server on loopback with ``routes`` (GET); yields its ``/v1`` base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def json_answer(body: Any, seen: list[web.Request] | None = None) -> Any:
    async def handler(request: web.Request) -> web.Response:
        if seen is not None:
            seen.append(request)
        return web.json_response(body)

    return handler


async def test_hosted_lists_without_a_window_fall_back_to_the_table() -> None:
    """A models list that says nothing of windows (OpenAI's shape), no /props: the table."""
    listing = {"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]}
    async with serve({"/v1/models": json_answer(listing)}) as url:
        assert await server_window(url) is None
        budget = await ContextBudget.from_server(url, model="gpt-4o")
        with pytest.raises(ConfigError, match="does not report its context window"):
            await ContextBudget.from_server(url, model="not-in-the-table")
    assert (budget.window, budget.window_source) == (None, "table")
    assert budget.window_of("gpt-4o") == 128_000


async def test_llamacpp_shapes_meta_n_ctx_and_props() -> None:
    """llama.cpp's models list carries the slot's n_ctx in meta; older builds only /props."""
    new = {"object": "list", "data": [{"id": "smollm2", "aliases": ["smollm2"],
           "owned_by": "llamacpp", "meta": {"n_ctx": 8192, "n_ctx_train": 8192}}]}  # fmt: skip
    old = {"object": "list", "data": [{"id": "m.gguf", "meta": {"n_ctx_train": 32768}}]}
    props = {"default_generation_settings": {"n_ctx": 2048}, "model_alias": "m"}
    async with serve({"/v1/models": json_answer(new)}) as url:
        found = await server_window(url, model="smollm2")
    assert found is not None and (found.tokens, found.field) == (8192, "meta.n_ctx")
    async with serve({"/v1/models": json_answer(old), "/props": json_answer(props)}) as url:
        found = await server_window(url)
    assert found is not None and (found.tokens, found.field, found.model) == (
        2048,
        "props.n_ctx",
        "m",
    )


async def test_several_models_need_a_name() -> None:
    listing = {
        "object": "list",
        "data": [
            {"id": "big", "max_model_len": 1_000_000},
            {"id": "small", "root": "org/small", "max_model_len": 32_768},
        ],
    }
    async with serve({"/v1/models": json_answer(listing)}) as url:
        small = await server_window(url, model="org/small")
        with pytest.raises(ConfigError, match="several models with different windows"):
            await server_window(url)
        # A name it does not serve: the error says so, not "pass model=".
        with pytest.raises(ConfigError, match="model 'gpt-4o' is none of them"):
            await server_window(url, model="gpt-4o")
    assert small is not None and (small.tokens, small.model) == (32_768, "small")


async def test_names_that_are_not_strings_name_nothing() -> None:
    """A malformed entry — an object among its aliases, an id that is a list — is read for
    its string names only (it was a bare TypeError: the names went into a set)."""
    listing = {"object": "list", "data": [
        {"id": ["big"], "aliases": [{"name": "x"}, "big-alias"], "max_model_len": 1_000_000},
        {"id": "small", "root": {"org": "small"}, "aliases": [["s"]], "max_model_len": 32_768},
    ]}  # fmt: skip
    async with serve({"/v1/models": json_answer(listing)}) as url:
        big = await server_window(url, model="big-alias")
        small = await server_window(url, model="small")
        budget = await ContextBudget.from_server(url, model="small")
        with pytest.raises(ConfigError, match=r"\(None: 1,000,000, 'small': 32,768\)"):
            await server_window(url)
    assert big is not None and (big.tokens, big.model) == (1_000_000, "big-alias")
    assert small is not None and (small.tokens, small.model) == (32_768, "small")
    assert budget.window == 32_768
    one = {"object": "list", "data": [{"id": ["m"], "max_model_len": 8192}]}
    async with serve({"/v1/models": json_answer(one)}) as url:
        found = await server_window(url, model="m")  # a one-model server: its window
    assert found is not None and (found.tokens, found.model) == (8192, "m")


async def test_the_key_goes_with_the_request() -> None:
    seen: list[web.Request] = []
    listing = {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}
    async with serve({"/v1/models": json_answer(listing, seen)}) as url:
        await server_window(Endpoint(base_url=url, api_key="sk-window-test"))
        await server_window(url.replace("http://", "http://user:pw@"))
    assert seen[0].headers["Authorization"] == "Bearer sk-window-test"
    assert seen[1].headers["Authorization"].startswith("Basic ")


async def test_every_read_has_a_limit() -> None:
    """A server that accepts and never answers fails after timeout_s, not never."""
    never = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await never.wait()  # until the test is done with it
        return web.json_response({})

    async with serve({"/v1/models": hang}) as url:
        with pytest.raises(StreamTimeout) as info:
            await asyncio.wait_for(server_window(url, timeout_s=0.2), 60)
        never.set()
    assert (info.value.phase, info.value.timeout_s) == ("total", 0.2)
    with pytest.raises(ConnectError):
        await server_window(f"http://127.0.0.1:{free_port()}/v1")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: server_window("http://127.0.0.1:1/v1", timeout_s=0),
            "timeout_s must be a finite number",
        ),
        (
            lambda: server_window("http://127.0.0.1:1/v1", timeout_s=float("inf")),
            "timeout_s must be a finite number",
        ),
        (lambda: server_window(42), "source must be a base URL"),
        (lambda: server_window("ftp://host/v1"), "base_url must be an http"),
        (
            lambda: ContextBudget.from_server("http://127.0.0.1:1/v1", window=10),
            "do not pass window=",
        ),
    ],
)
async def test_bad_input_is_a_config_error(call: Callable[[], Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        await call()


def test_the_budget_says_where_its_window_came_from() -> None:
    assert ContextBudget(window=5000).window_source == "given"
    assert ContextBudget(model="gpt-4o").window_source == "table"


async def test_an_answer_in_pieces_is_read_whole() -> None:
    """The models list written in two parts, with a pause between: still read whole (a
    read returns what has arrived so far, not the body)."""
    body = b'{"object": "list", "data": [{"id": "m", "max_model_len": 1000000}]}'
    second_part = asyncio.Event()

    async def pieces(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(body[:20])
        await second_part.wait()
        await resp.write(body[20:])
        await resp.write_eof()
        return resp

    async with serve({"/v1/models": pieces}) as url:
        reading = asyncio.create_task(server_window(url))
        await asyncio.sleep(0)  # let the request go; the first part arrives alone
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, second_part.set)
        found = await asyncio.wait_for(reading, 60)
    assert found is not None and found.tokens == 1_000_000
