"""Tool calls have a time limit, and a stuck sync tool cannot keep the process alive.

Model turns come from a real loopback server (:class:`ScriptedServer`) or the simulator;
timings are checked only on the virtual clock. The exit tests run a small script in a
child Python and check that it exits; the 60 s bound there is a hang guard, not a
duration being measured.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import math
import os
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentflow import (
    DEFAULT_TOOL_TIMEOUT_S,
    Agent,
    ConfigError,
    ErrorEvent,
    Event,
    Fleet,
    HTTPTransport,
    Tool,
    ToolError,
    ToolResultEvent,
    ToolTimeout,
    tool,
)
from agentflow._threads import DaemonThreadExecutor
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.testing import Reply, ScriptedServer
from tests.toolcall import tool_message

ROOT = Path(__file__).resolve().parents[1]


async def hang() -> str:
    """An async tool that never returns."""
    await asyncio.Event().wait()
    return "unreachable"


async def test_a_hung_async_tool_is_a_tool_error_and_the_fleet_returns() -> None:
    """The hung call ends at its limit; the model gets an error naming the tool and the
    limit, answers, and ``Fleet.run`` returns."""
    agent = Agent(name="a", model="m", tools=[hang], tool_timeout_s=0.2)
    events: list[Event] = []
    async with (
        ScriptedServer([Reply.tool_call("hang", {}), Reply.text("gave up")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        fleet = Fleet(http, callbacks=[events.append])
        result = await asyncio.wait_for(fleet.run([agent.session("go")]), 60)
        srv.assert_complete()
    (session,) = result.sessions
    assert session.ok and session.final_output == "gave up"
    sent = tool_message(srv, 1)
    assert sent.startswith("Error: tool 'hang' did not return within its time limit of 0.2 s")
    (res,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert res.is_error and res.output == sent and res.name == "hang"
    (err,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert err.where == "tool" and isinstance(err.error, ToolTimeout)
    assert err.error.tool == "hang" and err.error.timeout_s == 0.2 and not err.error.threaded


async def test_tool_errors_raise_ends_the_session_with_a_tool_timeout() -> None:
    """With ``tool_errors="raise"`` the timeout ends the session: a ToolTimeout (a
    ToolError) naming the tool and its limit; the fleet still returns."""
    agent = Agent(name="a", model="m", tools=[hang], tool_timeout_s=0.2, tool_errors="raise")
    async with (
        ScriptedServer([Reply.tool_call("hang", {})]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await asyncio.wait_for(Fleet(http).run([agent.session("go")]), 60)
        srv.assert_complete()
    (session,) = result.failed
    assert session.status == "error" and len(session.turns) == 1
    error = session.error
    assert isinstance(error, ToolTimeout) and isinstance(error, ToolError)
    assert error.tool == "hang" and error.timeout_s == 0.2
    assert "'hang'" in str(error) and "0.2 s" in str(error)


def test_the_tools_own_limit_beats_the_agents_and_both_are_exact_in_virtual_time() -> None:
    """A tool's ``timeout_s`` overrides the agent's ``tool_timeout_s``; a tool without
    one takes the agent's. On the virtual clock each call ends exactly at its limit."""

    @tool(timeout_s=5)
    async def quick_hang() -> str:
        """Hangs; its own limit is 5 s."""
        return await hang()

    @tool
    async def slow_hang() -> str:
        """Hangs; it takes the agent's limit."""
        return await hang()

    results: list[ToolResultEvent] = []

    def keep(event: Event) -> None:
        if isinstance(event, ToolResultEvent):
            results.append(event)

    async def main(agent: Agent) -> None:
        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=3,
            textgen=TextGenConfig(tool_rounds=1, answer_tokens=(4, 8)),
        )
        transport = SimTransport(EngineDriver(engine))
        fleet = Fleet(transport, clock=loop_clock, callbacks=[keep])
        try:
            result = await fleet.run(agent.session(f"t{i}") for i in range(4))
        finally:
            await transport.aclose()
        assert all(s.ok for s in result.sessions), [s.error for s in result.sessions]

    run_virtual(main(Agent(name="own", model="m", tools=[quick_hang], tool_timeout_s=600)))
    run_virtual(main(Agent(name="agent", model="m", tools=[slow_hang], tool_timeout_s=42)))
    own = [r for r in results if r.agent == "own"]
    agents = [r for r in results if r.agent == "agent"]
    assert len(own) == len(agents) == 4
    assert all(r.is_error and r.duration_s == 5.0 for r in own)
    assert all("'quick_hang'" in r.output and "of 5 s" in r.output for r in own)
    assert all(r.is_error and r.duration_s == 42.0 for r in agents)
    assert all("'slow_hang'" in r.output and "of 42 s" in r.output for r in agents)


def test_a_sync_tool_is_not_timed_out_by_virtual_time_jumping_ahead() -> None:
    """Under the virtual clock, a sync tool whose thread takes real time is not timed
    out by the clock jumping to its limit: the loop waits for the thread (for real, up
    to the limit), and the call takes no virtual time."""

    def slow(x: int) -> int:
        time.sleep(0.05)  # real work in a thread, well inside the 30 s limit
        return x + 1

    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = await Tool.from_function(slow, timeout_s=30).invoke('{"x": 41}')
        return out, loop.time() - start

    assert run_virtual(main()) == ("42", 0.0)


def test_a_stuck_sync_tool_times_out_at_its_limit_in_virtual_time() -> None:
    """A sync tool that never returns still meets its limit on the virtual clock: the
    call ends exactly at the limit with a ToolTimeout that says its thread runs on."""
    release = threading.Event()

    def stuck() -> str:
        release.wait()
        return "late"

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ToolTimeout) as info:
            await Tool.from_function(stuck, timeout_s=0.5).invoke("{}")
        assert info.value.threaded and "thread keeps running" in str(info.value)
        return loop.time() - start

    try:
        assert run_virtual(main()) == 0.5
    finally:
        release.set()


class _Search:
    """Search (an object whose ``__call__`` is async)."""

    async def __call__(self, q: str) -> str:
        return await hang()


async def _search(q: str) -> str:
    """Search."""
    return await hang()


wrapper_threads: list[threading.Thread] = []


@functools.wraps(_search)
def _search_wrapper(*args: Any, **kwargs: Any) -> Any:
    """A plain decorator's sync wrapper of an async tool (it returns the coroutine)."""
    wrapper_threads.append(threading.current_thread())
    return _search(*args, **kwargs)


@pytest.mark.parametrize("fn", [_Search(), _search_wrapper], ids=["async_call", "wraps"])
def test_an_async_callable_that_is_no_async_def_runs_on_the_loop(fn: Any) -> None:
    """An object with an ``async def __call__``, or a ``functools.wraps`` sync wrapper of
    an async function, is an async tool (as it is an async callback): it used to be
    called in a worker thread, and its ToolTimeout said, falsely, that its thread keeps
    running."""
    wrapper_threads.clear()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ToolTimeout) as info:
            await Tool.from_function(fn, name="search", timeout_s=7).invoke('{"q": "x"}')
        assert not info.value.threaded and "thread" not in str(info.value)
        return loop.time() - start

    assert run_virtual(main()) == 7.0
    assert all(t is threading.main_thread() for t in wrapper_threads)


async def test_sync_tools_run_in_daemon_threads_with_the_callers_context() -> None:
    """A sync tool's thread is a daemon (never joined at exit) and sees the caller's
    context variables (structlog's bound agent/session among them)."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def where() -> dict[str, Any]:
        t = threading.current_thread()
        return {"daemon": t.daemon, "main": t is threading.main_thread(), "var": var.get()}

    var.set("from the caller")
    out = json.loads(await Tool.from_function(where).invoke("{}"))
    assert out == {"daemon": True, "main": False, "var": "from the caller"}


async def test_the_daemon_pool_reuses_idle_threads_and_grows_past_stuck_ones() -> None:
    """Calls one after another share one thread; a stuck call does not hold the next
    one up (the pool starts another thread); idle threads end after ``idle_s``. (Reuse
    is checked with a long ``idle_s``: with a short one, a loaded machine may leave the
    thread idle long enough between two calls for it to end — a new thread is correct
    then too.)"""
    loop = asyncio.get_running_loop()
    pool = DaemonThreadExecutor("test-pool", idle_s=60)
    names = {await loop.run_in_executor(pool, lambda: threading.current_thread().name)}
    for _ in range(20):
        names.add(await loop.run_in_executor(pool, lambda: threading.current_thread().name))
    assert names == {"test-pool-1"} and pool.threads == 1
    release = threading.Event()
    stuck = loop.run_in_executor(pool, release.wait)
    assert await asyncio.wait_for(loop.run_in_executor(pool, lambda: 42), 60) == 42
    assert pool.running == 1 and not stuck.done()
    release.set()
    assert await asyncio.wait_for(stuck, 60) is True
    workers = [t for t in threading.enumerate() if t.name.startswith("test-pool-")]
    assert len(workers) == 2 and all(t.daemon for t in workers)

    brief = DaemonThreadExecutor("brief-pool", idle_s=0.05)
    await loop.run_in_executor(brief, release.wait)
    (worker,) = [t for t in threading.enumerate() if t.name.startswith("brief-pool-")]
    await asyncio.to_thread(worker.join, 60)  # it goes idle and ends (60 s: a hang guard)
    assert not worker.is_alive() and brief.threads == brief.running == 0


async def test_a_tools_own_timeout_error_is_a_plain_tool_error() -> None:
    """A TimeoutError the tool raises itself, well inside its limit, is reported as the
    tool raising — not as the call running out of time."""

    async def gives_up() -> str:
        raise TimeoutError("upstream took too long")

    with pytest.raises(ToolError) as info:
        await Tool.from_function(gives_up).invoke("{}")
    assert not isinstance(info.value, ToolTimeout)
    assert "raised TimeoutError: upstream took too long" in str(info.value)


async def test_an_infinite_limit_means_none() -> None:
    """``math.inf`` is no limit: the call runs until it returns."""

    async def napper() -> str:
        await asyncio.sleep(0.01)
        return "rested"

    assert await Tool.from_function(napper, timeout_s=math.inf).invoke("{}") == "rested"
    assert Agent(name="a", model="m", tool_timeout_s=math.inf).tool_timeout_s == math.inf


def test_the_default_limit_is_finite() -> None:
    """Without any setting a tool call may run for DEFAULT_TOOL_TIMEOUT_S (300 s)."""
    assert DEFAULT_TOOL_TIMEOUT_S == 300.0
    assert Agent(name="a", model="m").tool_timeout_s == DEFAULT_TOOL_TIMEOUT_S
    assert Tool.from_function(hang).timeout_s is None  # takes the agent's


@pytest.mark.parametrize("bad", [0, -1, math.nan, True, "5"])
def test_bad_limits_are_config_errors_naming_the_field(bad: object) -> None:
    """A limit that is not a positive number of seconds is refused, by name."""
    with pytest.raises(ConfigError, match=r"'a': tool_timeout_s"):
        Agent(name="a", model="m", tool_timeout_s=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"tool 'hang': timeout_s"):
        Tool.from_function(hang, timeout_s=bad)  # type: ignore[arg-type]


async def test_a_bad_default_limit_passed_to_invoke_is_refused() -> None:
    """``Tool.invoke(default_timeout_s=0)`` is a ConfigError, not a call that times out at once."""
    with pytest.raises(ConfigError, match="default_timeout_s"):
        await Tool.from_function(hang).invoke("{}", default_timeout_s=0)


_SCRIPT = """
import asyncio, json, sys, threading

from agentflow import Agent, HTTPTransport
from agentflow.testing import Reply, ScriptedServer

entered = threading.Event()


def stuck() -> str:
    '''A sync tool that never returns.'''
    entered.set()
    threading.Event().wait()
    return "unreachable"


async def main(mode: str) -> None:
    replies = [Reply.tool_call("stuck", {{}}), Reply.text("done")]
    limit = 0.3 if mode == "timeout" else float("inf")
    agent = Agent(name="a", model="m", tools=[stuck], tool_timeout_s=limit)
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as http:
        task = asyncio.create_task(agent.run("go", http))
        if mode == "cancel":
            await asyncio.to_thread(entered.wait)
            task.cancel()
        try:
            result = await task
            out = {{"status": result.status, "tool": result.messages[-2]["content"]}}
        except asyncio.CancelledError:
            out = {{"status": "cancelled"}}
    alive = [t.name for t in threading.enumerate() if t.name.startswith("agentflow-tool")]
    print(json.dumps({{**out, "alive": alive}}), flush=True)


asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("mode", ["timeout", "cancel"])
async def test_a_stuck_sync_tool_does_not_keep_the_process_alive(mode: str, tmp_path: Path) -> None:
    """A child Python whose sync tool is stuck for good — timed out, or its session
    cancelled — still exits once its main returns; the stuck thread is still alive
    then (Python cannot stop it), and the interpreter does not wait for it."""
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(_SCRIPT.format()))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)  # hang guard
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["alive"] == ["agentflow-tool-1"]
    if mode == "timeout":
        assert report["status"] == "completed"
        assert report["tool"].startswith(
            "Error: tool 'stuck' did not return within its time limit of 0.3 s"
        )
        assert "thread keeps running" in report["tool"]
    else:
        assert report["status"] == "cancelled"


def test_an_async_tool_that_swallows_its_timeout_is_still_timed_out() -> None:
    """An async tool that caught the cancellation its limit sent and then returned had
    its late result taken as a success; the call is a ToolTimeout at its limit."""

    @tool(timeout_s=0.2)
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.1)
            return "swallowed"
        return "slept"

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ToolTimeout) as info:
            await stubborn.invoke("{}")
        assert not info.value.threaded
        return loop.time() - start

    assert run_virtual(main()) == pytest.approx(0.3)
