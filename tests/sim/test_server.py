"""The HTTP server: the official openai SDK against it, every route, errors, headers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from agentflow import HTTPTransport
from agentflow.sim import TextGenConfig
from agentflow.sim.server import SimServer
from agentflow.transport import ChatRequest

from ..wait import GUARD_S, eventually
from .simhttp import QUICK, STEPPY, TOOLS, chat_body, metric, parse_prometheus, sse_events, user


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(QUICK, seed=7, textgen=TextGenConfig(tool_rounds=1)) as server:
        yield server


@pytest.fixture
async def client(sim: SimServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as c:
        yield c


async def test_sdk_streaming_with_usage(sim: SimServer, client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="steppy",
        messages=[{"role": "user", "content": "Say something."}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=20,
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["length"]
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert usage.completion_tokens == 20 and usage.total_tokens == usage.prompt_tokens + 20
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0
    rec = sim.driver.record(chunks[0].id)
    assert rec is not None and rec.completion_tokens == 20
    messages = [{"role": "user", "content": "Say something."}]
    plan = sim.engine.textgen.plan(messages, sim.engine.tokenizer.render_chat(messages))
    assert text == plan.text_of(0, 20)  # the seeded model's answer
    assert all(c.model == "steppy" and c.id == chunks[0].id for c in chunks)


async def test_sdk_non_stream(client: openai.AsyncOpenAI) -> None:
    r = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=7
    )
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content and r.usage is not None
    assert r.usage.completion_tokens == 7


async def test_sdk_tool_loop(client: openai.AsyncOpenAI) -> None:
    """A tool call, its result sent back, then a final answer (tool_rounds=1)."""
    messages: list[Any] = [{"role": "user", "content": "Read README.md"}]
    tools: Any = TOOLS
    stream = await client.chat.completions.create(
        model="m", messages=messages, tools=tools, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    async for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        for tc in ch.delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                slot["id"] = tc.id
            if tc.function and tc.function.name:
                slot["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                slot["arguments"] += tc.function.arguments
        finish = ch.finish_reason or finish
    assert finish == "tool_calls" and list(calls) == [0]
    call = calls[0]
    assert call["name"] == "read_file" and call["id"].startswith("call_")
    assert isinstance(json.loads(call["arguments"])["path"], str)
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "# agentflow"})
    final = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    # The second turn's prompt extends the first: the prefix cache hits.
    assert final.usage is not None and final.usage.prompt_tokens_details is not None
    assert (final.usage.prompt_tokens_details.cached_tokens or 0) > 0


async def test_models_tokenize_health(sim: SimServer, client: openai.AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["quick"]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{sim.url}/health") as r:
            assert r.status == 200 and await r.read() == b""
        msgs = user("count me please")
        async with s.post(f"{sim.url}/tokenize", json={"model": "m", "messages": msgs}) as r:
            body = await r.json()
        tokens = sim.engine.tokenizer.render_chat(msgs)
        assert body == {
            "count": len(tokens),
            "max_model_len": 4096,
            "tokens": tokens,
            "token_strs": None,
        }
        async with s.post(f"{sim.url}/tokenize", json={"prompt": "hello world"}) as r:
            body = await r.json()
        assert body["count"] == 2 and body["tokens"] == sim.engine.tokenizer.encode("hello world")
        async with s.post(f"{sim.url}/tokenize", json={"nothing": 1}) as r:
            assert r.status == 400
        # The chat request's usage agrees with /tokenize.
        r2 = await client.chat.completions.create(model="m", messages=msgs, max_tokens=1)  # type: ignore[arg-type]
        assert r2.usage is not None and r2.usage.prompt_tokens == len(tokens)


async def test_metrics_move(sim: SimServer, client: openai.AsyncOpenAI) -> None:
    async def scrape() -> dict[Any, float]:
        async with aiohttp.ClientSession() as s, s.get(f"{sim.url}/metrics") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            return parse_prometheus(await r.text())

    before = await scrape()
    assert metric(before, "vllm:prefix_cache_queries_total") == 0
    assert metric(before, "vllm:num_requests_running") == 0
    long_prompt = "The same long system prompt, word after word. " * 40
    usages = []
    for _ in range(2):
        r = await client.chat.completions.create(
            model="m",
            messages=[
                {"role": "system", "content": long_prompt},
                {"role": "user", "content": "go"},
            ],
            max_tokens=5,
        )
        assert r.usage is not None
        usages.append(r.usage)
    after = await scrape()
    prompt = usages[0].prompt_tokens
    cached = usages[1].prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached and cached >= prompt - QUICK.block_size
    assert metric(after, "vllm:prefix_cache_queries_total") == 2 * prompt
    assert metric(after, "vllm:prefix_cache_hits_total") == cached
    assert metric(after, "vllm:prompt_tokens_total") == 2 * prompt
    assert metric(after, "vllm:generation_tokens_total") == 10
    assert metric(after, "vllm:time_to_first_token_seconds_count") == 2
    assert metric(after, "vllm:inter_token_latency_seconds_count") == 8
    # As vLLM v1: TPOT per request; the old name is per token (an ITL), deprecated.
    assert metric(after, "vllm:request_time_per_output_token_seconds_count") == 2
    assert metric(after, "vllm:time_per_output_token_seconds_count") == 8
    assert metric(after, "vllm:request_success_total", finished_reason="length") == 2
    assert metric(after, "vllm:time_to_first_token_seconds_bucket", le="+Inf") == 2
    assert metric(after, "vllm:num_preemptions_total") == 0
    assert 0 <= metric(after, "vllm:kv_cache_usage_perc") <= 1
    assert metric(after, "agentflow_sim:time_scale") == 1.0
    # TTFT sum is the ground truth's.
    ttft = sum(
        sim.driver.record(i).ttft_s  # type: ignore[union-attr,misc]
        for i in range(2)
    )
    assert metric(after, "vllm:time_to_first_token_seconds_sum") == pytest.approx(ttft)


async def test_metrics_parse_with_prometheus_client(sim: SimServer) -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    async with aiohttp.ClientSession() as s, s.get(f"{sim.url}/metrics") as r:
        text = await r.text()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert families["vllm:prefix_cache_queries"].type == "counter"
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert families["vllm:kv_cache_usage_perc"].type == "gauge"


async def test_error_shapes(sim: SimServer, client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as ei:
        await client.chat.completions.create(model="m", messages=user("x"), n=2)  # type: ignore[arg-type]
    assert ei.value.status_code == 400
    assert ei.value.body == {
        "message": "The simulator serves n=1 only, got n=2.",
        "type": "BadRequestError",
        "param": "n",
        "code": 400,
    }
    with pytest.raises(openai.BadRequestError) as ei:
        await client.chat.completions.create(model="m", messages=user("word " * 5000))  # type: ignore[arg-type]
    msg = ei.value.body["message"]  # type: ignore[index]
    assert msg.startswith(
        "This model's maximum context length is 4096 tokens. However, your request has"
    )
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        await client.chat.completions.create(model="m", messages=user("x"), max_tokens=4096)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{sim.base_url}/chat/completions", data=b"{not json") as r:
            assert r.status == 400 and (await r.json())["error"]["type"] == "BadRequestError"
        async with s.get(f"{sim.url}/agentflow/requests/chatcmpl-999") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == 404
        async with s.get(f"{sim.base_url}/chat/completions") as r:
            assert r.status == 405 and (await r.json())["error"]["code"] == 405
        async with s.get(f"{sim.url}/v1/nothing") as r:
            assert r.status == 404 and (await r.json())["error"]["type"] == "NotFoundError"
    assert sim.driver.active == 0


async def test_time_scale_and_request_id_headers() -> None:
    async with SimServer(QUICK, time_scale=2.5) as sim, aiohttp.ClientSession() as s:
        async with s.get(f"{sim.url}/health") as r:
            assert r.headers["x-agentflow-time-scale"] == "2.5"
        async with s.post(f"{sim.base_url}/chat/completions", json={"messages": []}) as r:
            assert r.status == 400 and r.headers["x-agentflow-time-scale"] == "2.5"
        async with s.post(f"{sim.base_url}/chat/completions", json=chat_body(max_tokens=3)) as r:
            assert r.headers["x-agentflow-time-scale"] == "2.5"
            assert r.headers["Content-Type"].startswith("text/event-stream")
            rid = r.headers["x-agentflow-request-id"]
            events = sse_events(await r.read())
        assert json.loads(events[0])["id"] == rid and events[-1] == b"[DONE]"
        async with s.post(
            f"{sim.base_url}/chat/completions", json=chat_body(stream=False, max_tokens=3)
        ) as r:
            assert r.headers["x-agentflow-request-id"] == (await r.json())["id"]


async def test_ground_truth_endpoint(sim: SimServer) -> None:
    async with HTTPTransport(sim.base_url) as t:
        trace = await t.stream(
            ChatRequest(model="m", messages=user("truth"), params={"max_tokens": 12})
        )
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{sim.url}/agentflow/requests/{trace.response_id}") as r,
    ):
        truth = await r.json()
    assert (
        truth["id"] == trace.response_id
        and truth["finished"]
        and truth["finish_reason"] == "length"
    )
    assert len(truth["token_times_s"]) == 12 == truth["completion_tokens"]
    assert truth["ttft_s"] == pytest.approx(truth["token_times_s"][0] - truth["arrival_s"])
    assert truth["queue_s"] >= 0 and truth["prefill_s"] > 0 and truth["num_preemptions"] == 0
    assert truth["cached_tokens"] == 0 and truth["time_scale"] == 1.0
    assert truth["timings"] == trace.server_timings
    assert trace.response_headers["x-agentflow-request-id"] == trace.response_id


async def test_a_tool_call_answer_counts_as_stop_in_metrics(
    sim: SimServer, client: openai.AsyncOpenAI
) -> None:
    """vLLM's ``vllm:request_success`` knows stop, length and abort: a tool-call answer ends
    on a stop token and is counted as ``stop`` (only the chat response says
    ``tool_calls``); the simulator exported a ``finished_reason="tool_calls"`` series."""
    r = await client.chat.completions.create(
        model="m",
        messages=user("read it"),  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
    )
    assert r.choices[0].finish_reason == "tool_calls"
    async with aiohttp.ClientSession() as s, s.get(f"{sim.url}/metrics") as resp:
        samples = parse_prometheus(await resp.text())
    assert metric(samples, "vllm:request_success_total", finished_reason="stop") == 1
    assert metric(samples, "vllm:request_success_total", finished_reason="length") == 0
    reasons = {
        dict(labels).get("finished_reason")
        for name, labels in samples
        if name == "vllm:request_success_total"
    }
    assert reasons == {"stop", "length"}


async def test_tokens_per_chunk_over_http() -> None:
    async with SimServer(QUICK, tokens_per_chunk=4) as sim, HTTPTransport(sim.base_url) as t:
        trace = await t.stream(
            ChatRequest(model="m", messages=user("grouped"), params={"max_tokens": 21})
        )
    assert trace.usage is not None and trace.usage.completion_tokens == 21
    assert len(trace.chunk_ns) == 6  # the first token alone, then 5 × 4 tokens
    assert sum(trace.chunk_tokens) == 21
    # Each chunk leaves once its last token's step is due, never before: the client reads
    # chunk i no sooner than that token's time after arrival (causality, not a gap on the
    # real clock, which a loaded machine stretches or squeezes).
    rec = sim.driver.record(trace.response_id or "")
    assert rec is not None and len(rec.token_times_s) == 21
    last_token = [rec.token_times_s[4 * i] for i in range(6)]
    for chunk_ns, due_s in zip(trace.chunk_ns, last_token, strict=True):
        assert (chunk_ns - trace.sent_ns) / 1e9 >= due_s - rec.arrival_s - 0.0005


async def test_client_disconnect_aborts_the_request(sim: SimServer) -> None:
    async with aiohttp.ClientSession() as s:
        r = await s.post(
            f"{sim.base_url}/chat/completions", json=chat_body("long", max_tokens=3000)
        )
        rid = r.headers["x-agentflow-request-id"]
        await r.content.readexactly(200)
        r.close()

    def aborted() -> bool:
        rec = sim.driver.record(rid)
        return rec is not None and rec.finish_reason == "abort"

    await eventually(aborted, "the request to be aborted")
    rec = sim.driver.record(rid)
    assert rec is not None and rec.finish_reason == "abort" and rec.completion_tokens < 3000
    assert sim.engine.stats().requests_aborted == 1 and sim.driver.active == 0


async def test_queued_request_aborted_when_client_leaves() -> None:
    """A request still waiting in the engine's queue is aborted when its client goes."""
    one_seq = dataclasses.replace(STEPPY, max_num_seqs=1)
    async with SimServer(one_seq) as sim, aiohttp.ClientSession() as s:
        first = await s.post(
            f"{sim.base_url}/chat/completions", json=chat_body("a", max_tokens=500)
        )
        # Headers come at once (as vLLM's do), the tokens only once it is admitted.
        second = await s.post(f"{sim.base_url}/chat/completions", json=chat_body("b", max_tokens=5))
        assert sim.engine.num_waiting == 1
        second.close()
        await eventually(lambda: sim.engine.num_waiting == 0, "the queued request to go")
        assert sim.engine.num_waiting == 0 and sim.engine.stats().requests_aborted == 1
        assert sim.engine.num_running == 1
        first.close()


async def test_stop_ends_streams_promptly() -> None:
    long = TextGenConfig(answer_tokens=(3000, 3000))
    sim = SimServer(QUICK, textgen=long)
    await sim.start()
    async with aiohttp.ClientSession() as s:
        streaming = await s.post(f"{sim.base_url}/chat/completions", json=chat_body("a"))
        waiting = asyncio.create_task(
            s.post(f"{sim.base_url}/chat/completions", json=chat_body("b", stream=False))
        )
        stalled = asyncio.create_task(
            s.post(
                f"{sim.base_url}/chat/completions",
                json=chat_body("c", stream=False, max_tokens=2),
                headers={"X-Agentflow-Fault": "stall_mid_stream; seconds=3600"},
            )
        )
        await streaming.content.readexactly(100)

        def stalling() -> bool:  # "c" has its two tokens delivered; its body is held back
            recs = [sim.driver.record(rid) for rid in (1, 2)]
            done = any(r is not None and r.finish_reason == "length" for r in recs)
            return done and sim.driver.active == 2

        await eventually(stalling, "the stalled request to reach its stall")
        # Stopping does not wait for the hour-long stall: the hang guard would fail first.
        await asyncio.wait_for(sim.stop(), GUARD_S)
        with pytest.raises(aiohttp.ClientPayloadError):
            await streaming.content.read()
        streaming.close()
        r = await waiting
        assert r.status == 503 and "shutting down" in (await r.json())["error"]["message"]
        r = await stalled
        assert r.status == 200  # the stall ended early: its body goes out
        assert sim.driver.active == 0
