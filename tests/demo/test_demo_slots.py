"""`agentflow demo --base-url`: the slots warning counts what the run can have in flight."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from agentflow.demo import run as demo_run
from agentflow.demo.run import DemoConfig
from agentflow.llamacpp import free_port


class _Asked(Exception):
    """Ends the run once the demo has asked for the server's slots."""


@pytest.mark.parametrize(("agents", "most"), [(2, 2), (64, 16), (100, 16)])
def test_the_slots_warning_counts_the_agents(
    agents: int, most: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo asks with the least of --max-concurrency and --agents, as a Fleet's own probe
    does (one session per agent): --agents 2 on a 4-slot server was warned "the fleet sends
    up to 64"."""
    asked: list[tuple[str, int, dict[str, Any]]] = []

    async def oversubscription(base_url: str, concurrency: int, **kwargs: Any) -> str | None:
        asked.append((base_url, concurrency, kwargs))
        raise _Asked

    monkeypatch.setattr(demo_run, "oversubscription", oversubscription)
    url = f"http://127.0.0.1:{free_port()}/v1"  # never reached: the run ends when it asks
    config = DemoConfig(
        base_url=url, api_key="sk-demo", agents=agents, max_concurrency=16, live=False
    )
    with pytest.raises(_Asked):
        demo_run.run_demo(config, console=Console(file=io.StringIO()))
    assert asked == [(url, most, {"api_key": "sk-demo", "timeout_s": 5.0})]
