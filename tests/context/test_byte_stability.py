"""Byte-stable prompts: the same agent sends the same bytes for its shared prefix on every
turn of every session, however its tool schemas were built, and nothing volatile rides in
the body."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import msgspec
from aiohttp import web

from agentflow import Agent, HTTPTransport, Tool
from agentflow.sim.server import SimServer
from agentflow.testing import Reply, ScriptedServer

SCHEMA_A: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "the city"},
        "units": {"enum": ["metric", "imperial"], "default": "metric", "type": "string"},
    },
    "required": ["city"],
    "additionalProperties": False,
}
# The same schema, built in another order at every level.
SCHEMA_B: dict[str, Any] = {
    "additionalProperties": False,
    "required": ["city"],
    "properties": {
        "units": {"type": "string", "default": "metric", "enum": ["metric", "imperial"]},
        "city": {"description": "the city", "type": "string"},
    },
    "type": "object",
}
INSTRUCTIONS = "You are a weather assistant. Use the tool, then answer in one sentence."


def weather(city: str, units: str = "metric") -> str:
    return f"{city}: 21 degrees ({units})"


def forecast(city: str, days: int = 3) -> str:
    """A multi-day forecast.

    Args:
        city: the city.
        days: how many days.
    """
    return f"{city}: sunny for {days} days"


def make_agent(schema: dict[str, Any]) -> Agent:
    """The same agent definition, rebuilt (as each process or request handler would)."""
    tool = Tool(
        name="weather", description="Current weather for a city.", parameters=schema, fn=weather
    )
    return Agent(
        name="weather",
        model="m",
        instructions=INSTRUCTIONS,
        tools=[tool, forecast],
        params={"temperature": 0, "max_tokens": 32},
    )


class RawRecordingServer(ScriptedServer):
    """A ScriptedServer that also keeps each request body's exact bytes."""

    def __init__(self, replies: list[Reply]) -> None:
        super().__init__(replies)
        self.raw: list[bytes] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.raw.append(await request.read())  # aiohttp caches the body for the handler
        return await super()._handle(request)


class Body(msgspec.Struct):
    """The parts of a request body whose bytes matter, as the raw bytes that were sent."""

    model: msgspec.Raw
    messages: list[msgspec.Raw]
    tools: msgspec.Raw


def head_of(body: Body, *, messages: int | None = None) -> bytes:
    """The body's bytes up to the end of its ``messages[:messages]``."""
    parts = body.messages if messages is None else body.messages[:messages]
    return b'{"model":' + bytes(body.model) + b',"messages":[' + b",".join(map(bytes, parts))


async def test_two_sessions_share_every_byte_up_to_the_first_per_session_message() -> None:
    """Two sessions of one agent (rebuilt, its tool schema in another key order) over real
    HTTP: the bodies are identical up to the task message; each turn's body extends the
    previous turn's messages byte for byte; tools and trailing fields never change."""
    replies = [Reply.tool_call("weather", {"city": "Oslo"}), Reply.text("Mild.")] * 2
    srv = RawRecordingServer(replies)
    async with srv, HTTPTransport(srv.base_url) as transport:
        first = await make_agent(SCHEMA_A).run("Weather in Oslo?", transport)
        second = await make_agent(SCHEMA_B).run("Weather in Lima?", transport)
    assert first.ok and second.ok
    srv.assert_complete()
    raws = srv.raw
    bodies = [msgspec.json.decode(raw, type=Body) for raw in raws]
    # Layout: model, messages, then tools; the rest (params, stream flags) never varies.
    rests = set()
    for raw, body in zip(raws, bodies, strict=True):
        head = head_of(body) + b'],"tools":' + bytes(body.tools)
        assert raw.startswith(head)
        rests.add(raw[len(head) :])
    assert rests == {
        b',"temperature":0,"max_tokens":32,"stream":true,"stream_options":{"include_usage":true}}'
    }
    # Tools: byte-identical in every request, and canonical (keys sorted at every level).
    tools = {bytes(b.tools) for b in bodies}
    assert len(tools) == 1
    [sent] = tools
    assert sent == msgspec.json.encode(msgspec.json.decode(sent), order="sorted")
    # Across sessions: the full prefix up to the first per-session message is shared.
    shared = head_of(bodies[0], messages=1) + b","
    assert raws[0].startswith(shared) and raws[2].startswith(shared)
    assert bodies[0].messages[1] != bodies[2].messages[1]
    # Across turns: append-only history, so turn 2 starts with turn 1's messages.
    for a, b in ((0, 1), (2, 3)):
        assert raws[b].startswith(head_of(bodies[a]) + b",")


async def test_the_simulator_serves_the_second_sessions_shared_prefix_from_cache() -> None:
    """Over HTTP to the simulator: the second session's first turn hits the cache for
    (at least) the block-aligned part of the prefix both sessions share."""
    async with SimServer("cpu-tiny", seed=1) as sim, HTTPTransport(sim.base_url) as transport:
        agent_a = make_agent(SCHEMA_A)
        params = {**agent_a.params, "agentflow_tool_rounds": 0}
        runs = []
        for schema, task in ((SCHEMA_A, "Weather in Oslo?"), (SCHEMA_B, "Weather in Lima?")):
            agent = make_agent(schema)
            agent = Agent(
                name=agent.name,
                model=sim.model,
                instructions=agent.instructions,
                tools=agent.tools,
                params=params,
            )
            runs.append(await agent.run(task, transport))
    cold, warm = (r.turns[0].metrics for r in runs)
    assert cold.cached_tokens == 0
    assert warm.prompt_tokens is not None and warm.cached_tokens is not None
    # Everything but the task message (and its partial block) was served from cache.
    assert warm.cached_tokens >= warm.prompt_tokens - 2 * 16 - 16


_PRINT_SPECS = """
import msgspec
from agentflow.demo.workload import make_workload
w = make_workload(2, model="m")
print(msgspec.json.encode([a.tool_specs for a in w.agents]).hex())
"""


def test_tool_schemas_are_the_same_bytes_in_every_process() -> None:
    """A process with another hash seed produces the same tool bytes (no set or hash
    order leaks into a schema)."""
    from agentflow.demo.workload import make_workload

    here = msgspec.json.encode([a.tool_specs for a in make_workload(2, model="m").agents])
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    proc = subprocess.run(
        [sys.executable, "-c", _PRINT_SPECS],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": seed},
        timeout=120,
        check=True,
    )
    assert bytes.fromhex(proc.stdout.strip()) == here
