"""The demo's budget window: a real server's own, never an assumed 1,048,576."""

from __future__ import annotations

import dataclasses
import re

import pytest

from agentflow import HTTPTransport
from agentflow.demo._probes import window_of
from agentflow.demo.run import DemoConfig
from agentflow.llamacpp import free_port
from agentflow.sim import get_profile
from agentflow.sim.server import SimServer

SERVED = dataclasses.replace(
    get_profile("cpu-tiny"), name="demo-window", model="demo-window", max_model_len=1536
)


async def test_a_servers_window_is_read_from_it() -> None:
    async with SimServer(SERVED) as sim, HTTPTransport(sim.base_url) as transport:
        window = await window_of(DemoConfig(base_url=sim.base_url, live=False), transport)
    assert window == 1536


async def test_without_an_answer_the_table_then_the_profile() -> None:
    """An unreachable server: the model table's window for a known model, else the profile's
    (the deployment's --max-model-len, 1,000,000)."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with HTTPTransport(url) as transport:
        known = await window_of(DemoConfig(base_url=url, model="gpt-4o", live=False), transport)
        unknown = await window_of(DemoConfig(base_url=url, live=False), transport)
    assert (known, unknown) == (128_000, 1_000_000)
    assert await window_of(DemoConfig(live=False), transport) == 1_000_000


async def test_a_profile_whose_window_cannot_hold_the_prompt_is_refused_up_front() -> None:
    """``--profile cpu-tiny``: its 2,048-token window holds no demo prompt (~7.5k tokens),
    and every session used to fail with ContextOverflow at its first turn. Now a
    ConfigError names the profile and the sizes before anything starts — the same sizes
    the run's budget finds, whose failures, alike but for the session, the summary now
    counts as one error."""
    from agentflow import ConfigError, Fleet
    from agentflow.demo.summary import failure_lines
    from agentflow.demo.workload import make_workload
    from agentflow.testing import MockTransport, Reply

    with pytest.raises(ConfigError) as err:
        DemoConfig(profile="cpu-tiny", live=False)
    said = str(err.value)
    assert "2,048-token window of --profile cpu-tiny" in said
    assert "with --max-tokens 128" in said
    assert "deepseek-v4-gb300 (131,072)" in said  # a profile that holds it
    found = re.search(r"prompt is ~([\d,]+) tokens.* it needs ([\d,]+),", said)
    assert found is not None

    # What the run itself would have met (the demo's agents and budget, no server needed).
    work = make_workload(3, model="agentflow-sim", max_tokens=128, window=2048)
    sessions = [a.session(t) for a, t in zip(work.agents, work.tasks, strict=True)]
    result = await Fleet(MockTransport(lambda _: Reply.text("x"))).run(sessions)
    assert {type(s.error).__name__ for s in result.sessions} == {"ContextOverflow"}
    first = str(result.sessions[0].error)
    assert f"the prompt is ~{found[1]} tokens" in first
    assert f"it needs {found[2]} tokens" in first

    lines = failure_lines(result)
    assert len(lines) == 2, lines
    assert lines[0] == "3 sessions failed:"
    assert lines[1].startswith(f"  3 × ContextOverflow, e.g. {first[:40]}")


def test_failures_alike_but_for_their_session_are_one_line() -> None:
    """Grouped by type and message less the session's id and agent (and counts of
    thousands); a different status code stays a different error."""
    from agentflow import FleetResult, SessionResult
    from agentflow.demo.summary import failure_lines

    def failed(sid: str, agent: str, text: str) -> SessionResult:
        return SessionResult(
            session_id=sid, agent=agent, status="error", final_output=None, messages=[],
            turns=[], error=RuntimeError(text),
        )  # fmt: skip

    sessions = [
        failed(f"c{i}-1", f"c{i}", f"session 'c{i}-1' (agent 'c{i}'): ~{7_480 + i:,} tokens")
        for i in range(4)
    ] + [failed("x-1", "x", "answered 500"), failed("y-1", "y", "answered 503")]
    lines = failure_lines(FleetResult(sessions=sessions, wall_s=1.0, peak_in_flight=0))
    assert lines == [
        "6 sessions failed:",
        "  4 × RuntimeError, e.g. session 'c0-1' (agent 'c0'): ~7,480 tokens",
        "  1 × RuntimeError: answered 500",
        "  1 × RuntimeError: answered 503",
    ]
