"""The simulator's flags with ``--base-url``: ``demo --base-url … --time-scale 3`` and
``--profile X`` were ignored without a word (with ``--virtual``, ``--time-scale`` is
refused), and ``bench --profile`` was accepted with ``--base-url`` though its help says
"no --base-url". Each is now one line naming both flags, exit 2, before anything runs.
The server is a loopback port that refuses connections (the old code went on to fail
on it with another error)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow._errors import ConfigError
from agentflow.demo._config import DemoConfig

from ..test_cli_errors import assert_one_line, run


@pytest.fixture
def refused_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("demo", "--time-scale", "3"),
        ("bench", "--profile", "cpu-tiny"),
        ("bench", "--profile", "qwen2.5-coder-32b"),
    ],
)
def test_simulator_flags_are_refused_with_base_url(
    refused_url: str, command: str, flag: str, value: str
) -> None:
    url = refused_url
    extra = ["--agents", "1", "--no-live"] if command == "demo" else ["--rate", "1"]
    code, err = run(command, "--base-url", url, "--model", "m", *extra, flag, value)
    assert code == 2, err
    assert_one_line(err, f"agentflow {command}", flag, "--base-url")


def test_demo_config_refuses_them_too_unless_resuming() -> None:
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match=r"--time-scale .* --base-url"):
        DemoConfig(base_url=url, time_scale=3.0)
    DemoConfig(base_url=url)  # the defaults
    # A resumed run keeps what it was recorded with.
    DemoConfig(base_url=url, time_scale=3.0, profile="cpu-tiny", resume="r", store=Path("x.db"))


def test_the_profile_is_a_real_servers_window_fallback(refused_url: str) -> None:
    """With ``--base-url`` the profile still gives the budget's window when the server
    reports none and the model table does not know the model: refusing ``--profile``
    there left only the default profile's 1,000,000 tokens."""
    from agentflow.demo._probes import window_of
    from agentflow.transport import HTTPTransport

    async def window(profile: str) -> int:
        config = DemoConfig(base_url=refused_url, model="my-local-32k", profile=profile)
        async with HTTPTransport(refused_url) as transport:
            return await window_of(config, transport)

    assert asyncio.run(window("qwen2.5-coder-32b")) == 131_072
    assert asyncio.run(window("deepseek-v4.1-flash-gb300")) == 1_000_000


def test_a_recorded_run_over_the_agent_limit_resumes() -> None:
    """``MAX_AGENTS`` bounds a new run; a run recorded with more (before the bound) still
    resumes — it used to be refused, naming ``--agents``, which ``resume`` does not take."""
    DemoConfig(agents=150_000, resume="r", store=Path("x.db"))
    with pytest.raises(ConfigError, match="--agents is at most"):
        DemoConfig(agents=150_000)
