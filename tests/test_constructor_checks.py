"""Public constructors refuse a wrong value with a ConfigError naming the field, when they
are called: not a bare ``TypeError``, and not an error at every later event or request."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Tool, tool
from agentflow.testing import Reply, ScriptedServer

#: Wrong values, typed Any: the point is what happens when a caller passes them anyway.
FIVE: Any = 5
TEXT: Any = "ab"
LIST: Any = [1]


def _add(a: int, b: int) -> int:
    """Add."""
    return a + b


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: Agent(name="a", model="m", tools=FIVE), r"Agent 'a': tools must be a list"),
        (lambda: Agent(name="a", model="m", tools=TEXT), r"Agent 'a': tools must be a list"),
        (lambda: Agent(name="a", model="m", params=LIST), r"Agent 'a': params must be a mapping"),
        (
            lambda: Agent(name="a", model=FIVE),
            r"Agent 'a': model must be a non-empty string, got 5",
        ),
        (
            lambda: Agent(name="a", model="m").session("x", metadata=FIVE),
            r"session 'a-\d+': metadata must be a mapping",
        ),
        (
            lambda: Tool(name=FIVE, description="", parameters={}, fn=print),
            r"tool name must be a non-empty str .*got 5$",
        ),
        (
            lambda: Tool(name="", description="", parameters={}, fn=print),
            r"tool name must be .*got ''$",
        ),
        (lambda: tool(name="my tool")(_add), r"without whitespace.*got 'my tool'$"),
        (lambda: tool(name="a\x00b")(_add), r"printable.*got 'a\\x00b'$"),
        (lambda: tool(lambda: 1), r"got '<lambda>': pass name="),
        (
            lambda: Tool(name="x", description="", parameters={}, fn=FIVE),
            r"tool 'x': fn must be callable, got int",
        ),
        (
            lambda: tool(description=FIVE)(_add),
            r"tool '_add': description must be a str, got int",
        ),
        (
            lambda: Fleet(HTTPTransport("http://127.0.0.1:9/v1"), callbacks=FIVE),
            r"Fleet\.callbacks must be a list of callables, got int",
        ),
        (
            lambda: Fleet(HTTPTransport("http://127.0.0.1:9/v1"), callbacks=[print, FIVE]),
            r"Fleet\.callbacks\[1\] must be a callable",
        ),
        (
            lambda: Fleet(HTTPTransport("http://127.0.0.1:9/v1")).subscribe(FIVE),
            r"Fleet\.subscribe: callback must be a callable",
        ),
    ],
)
def test_a_wrong_value_is_a_config_error_naming_it(build: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build()


def test_good_values_still_pass(caplog: pytest.LogCaptureFixture) -> None:
    """The checks refuse nothing that worked: names of 64 characters, tools from a tuple,
    a params mapping, metadata, callbacks from a generator; names outside OpenAI's rule
    that vLLM and llama.cpp take (namespaced MCP tools, a long or non-ASCII name) are
    logged once each, not refused — runs recorded with them must still resume."""
    import logging

    caplog.set_level(logging.WARNING, logger="agentflow.tools")
    for name in ("web.search", "fs:read", "café", "x" * 65, "web.search"):
        Tool(name=name, description="", parameters={}, fn=print)
    logged = [
        r.getMessage() for r in caplog.records if "name_outside_openai_rule" in r.getMessage()
    ]
    assert len(logged) == 4
    named = Tool.from_function(_add, name="a-Z_09" + "x" * 58)
    agent = Agent(name="a", model="m", tools=(named,), params={"temperature": 0})
    assert agent.session("x", metadata={"k": 1}).metadata == {"k": 1}
    fleet = Fleet(HTTPTransport("http://127.0.0.1:9/v1"), callbacks=(c for c in [print]))
    fleet.subscribe(print)


async def test_a_callback_that_is_not_callable_never_reaches_a_run() -> None:
    """``Fleet(callbacks=[FIVE])`` was accepted, and every event of the run then failed the
    callback (a ``callback.failed`` warning and a ``CallbackFailure`` each)."""
    seen: list[str] = []
    async with (
        ScriptedServer([Reply.text("hi")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        with pytest.raises(ConfigError, match=r"callbacks\[0\]"):
            Fleet(t, callbacks=[FIVE])
        result = await Fleet(t, callbacks=[lambda e: seen.append(e.type)]).run(
            [Agent(name="a", model="m").session("go")]
        )
    assert result.callback_errors == [] and seen[0] == "fleet_start"
