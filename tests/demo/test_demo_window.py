"""The demo's budget window: a real server's own, never an assumed 1,048,576."""

from __future__ import annotations

import dataclasses

from agentflow import HTTPTransport
from agentflow.demo.run import DemoConfig, _window
from agentflow.llamacpp import free_port
from agentflow.sim import get_profile
from agentflow.sim.server import SimServer

SERVED = dataclasses.replace(
    get_profile("cpu-tiny"), name="demo-window", model="demo-window", max_model_len=1536
)


async def test_a_servers_window_is_read_from_it() -> None:
    async with SimServer(SERVED) as sim, HTTPTransport(sim.base_url) as transport:
        window = await _window(DemoConfig(base_url=sim.base_url, live=False), transport)
    assert window == 1536


async def test_without_an_answer_the_table_then_the_profile() -> None:
    """An unreachable server: the model table's window for a known model, else the profile's
    (the deployment's --max-model-len, 1,000,000)."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with HTTPTransport(url) as transport:
        known = await _window(DemoConfig(base_url=url, model="gpt-4o", live=False), transport)
        unknown = await _window(DemoConfig(base_url=url, live=False), transport)
    assert (known, unknown) == (128_000, 1_000_000)
    assert await _window(DemoConfig(live=False), transport) == 1_000_000
