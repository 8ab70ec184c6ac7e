"""One tool call over real HTTP, and the tool message the model got for it.

Many tests ask the same question of a tool: run an agent whose model calls it once and
then answers, and read what the model was sent as the call's result. The model is a
:class:`~agentflow.testing.ScriptedServer` on loopback, so the tool message is read off
the wire, as the server received it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentflow import Agent, HTTPTransport, SessionResult
from agentflow.testing import Reply, ScriptedServer
from agentflow.typing import Callback


def tool_message(srv: ScriptedServer, request: int) -> str:
    """The content of the one tool message in the server's ``request``-th request."""
    (msg,) = [m for m in srv.requests[request].body["messages"] if m["role"] == "tool"]
    content = msg["content"]
    assert isinstance(content, str)
    return content


async def one_call(
    agent: Agent, name: str, args: dict[str, Any], *, callbacks: Iterable[Callback] = ()
) -> tuple[SessionResult, str]:
    """Run ``agent`` on the task ``"go"``: its model calls ``name`` with ``args`` once, then
    answers ``"ok"``. The session's result, and the tool message the model got."""
    async with (
        ScriptedServer([Reply.tool_call(name, args), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await agent.session("go").run(http, callbacks=callbacks)
        srv.assert_complete()
    return result, tool_message(srv, 1)
