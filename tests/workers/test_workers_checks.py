"""The checks before a sharded run (``agentflow/_workers/_checks.py``) that need no worker
started: with ``backend="ray"``, whatever a session pickles by reference to the driver's
``__main__`` is refused (a Ray actor does not import the driver's main script); a
transport that has run in-process is taken, one that does not pickle is refused with a
hint that fits it."""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Iterator

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport
from agentflow._workers._checks import check_picklable
from agentflow.context import ContextBudget
from agentflow.testing import MockTransport, Reply, ScriptedServer
from agentflow.transport import AiohttpTransport

MAIN = sys.modules["__main__"]


def probe(key: str) -> str:
    """Look a key up."""
    return key


class MainPolicy(ContextBudget):
    """A context policy, as if defined in the driver's main script."""


@pytest.fixture
def in_main() -> Iterator[None]:
    """``probe`` and ``MainPolicy`` as a script's own (``__main__.probe``): they pickle
    by reference to ``__main__``, as a driver script's functions and classes do."""
    saved = (probe.__module__, MainPolicy.__module__)
    probe.__module__ = MainPolicy.__module__ = "__main__"
    MAIN.probe = probe  # type: ignore[attr-defined]
    MAIN.MainPolicy = MainPolicy  # type: ignore[attr-defined]
    try:
        yield
    finally:
        probe.__module__, MainPolicy.__module__ = saved
        del MAIN.probe
        del MAIN.MainPolicy


@pytest.mark.usefixtures("in_main")
def test_a_tool_or_policy_from_main_is_refused_on_ray_not_on_processes() -> None:
    """A Ray actor would fail every such session with a WorkerError: the run is refused
    before it starts, naming the agent and the object; worker processes import the main
    module (spawn), so they take it."""
    http = HTTPTransport("http://127.0.0.1:9")
    tooled = Agent(name="main_tool", model="m", tools=[probe])
    policed = Agent(name="main_policy", model="m", context=MainPolicy(window=10_000))
    ray = Fleet(http, workers=2, backend="ray")
    with pytest.raises(ConfigError, match=r"agent 'main_tool' uses __main__\.probe, defined"):
        check_picklable(ray, [tooled.session("q", session_id="s0")])
    with pytest.raises(ConfigError, match=r"agent 'main_policy' uses __main__\.MainPolicy"):
        check_picklable(ray, [policed.session("q", session_id="s1")])
    # Nor in a session's own state (its metadata):
    plain = Agent(name="plain", model="m")
    session = plain.session("q", session_id="s2", metadata={"key": probe})
    with pytest.raises(ConfigError, match=r"session 's2' \(agent 'plain'\) uses __main__\.probe"):
        check_picklable(ray, [session])
    processes = Fleet(http, workers=2)
    sessions = [tooled.session("q", session_id="s0"), policed.session("q", session_id="s1")]
    assert len(check_picklable(processes, sessions)) == 2


@pytest.mark.parametrize("cls", [HTTPTransport, AiohttpTransport])
def test_a_transport_that_ran_in_process_is_taken_for_workers(cls: type) -> None:
    """A fleet run in-process, then with workers on the same transport: its pool (or
    session) and loop stayed behind and did not pickle, and the run was refused."""
    agent = Agent(name="plain", model="m")

    async def main() -> int:
        async with ScriptedServer([Reply.text("ok")]) as srv, cls(srv.base_url) as t:
            done = await Fleet(t).run([agent.session("q", session_id="s0")])
            assert [s.status for s in done.sessions] == ["completed"]
            sessions = [agent.session("q", session_id="s1")]
            return len(check_picklable(Fleet(t, workers=2), sessions))

    assert asyncio.run(main()) == 1


def test_a_transport_that_does_not_pickle_is_refused_with_a_hint_of_its_own() -> None:
    """The refusal named the SimTransport and told to use HTTPTransport — to a user of an
    HTTPTransport (whose own ssl= context was the cause), or of another transport."""
    given = HTTPTransport("https://127.0.0.1:9", ssl=ssl.create_default_context())
    with pytest.raises(
        ConfigError, match="an ssl= context or an aiohttp session= does not: leave it out"
    ) as err:
        check_picklable(Fleet(given, workers=2), [])
    assert "SimTransport" not in str(err.value)
    other = Fleet(MockTransport(lambda _: Reply.text("ok")), workers=2)  # a lambda
    with pytest.raises(ConfigError, match="such as HTTPTransport or Aiohttp") as err:
        check_picklable(other, [])
    assert "SimTransport" not in str(err.value)


def test_the_warm_up_timeout_travels_to_the_workers() -> None:
    """A worker's fleet gets the parent's ``warmup_timeout_s`` (``None`` too), not the
    scheduler's default."""
    from agentflow._event_bus import EventBus
    from agentflow._workers._wire import worker_config

    for value in (3.0, None):
        fleet = Fleet(HTTPTransport("http://127.0.0.1:9/v1"), warmup_timeout_s=value)
        assert worker_config(fleet, EventBus(), None)["warmup_timeout_s"] == value
