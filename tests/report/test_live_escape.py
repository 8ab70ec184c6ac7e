"""The live view's "last error" line: a server's control characters are shown escaped.

A 400 whose message held ``ESC ] 0 ; … BEL`` (set the window title) and ``ESC [ 2 J``
(clear the screen) reached the terminal through the live view as it was: rich's ``Text``
strips BEL, BS, VT, FF and CR only. A real fleet against a :class:`ScriptedServer`.
"""

from __future__ import annotations

import io

from rich.console import Console

from agentflow import Agent, Fleet
from agentflow.report import LiveView
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import HTTPTransport

EVIL = "bad request\x1b]0;PWNED\x07\x1b[2J\x1b[H"


async def test_a_servers_escape_sequences_do_not_reach_the_terminal() -> None:
    buf = io.StringIO()
    view = LiveView(total_sessions=1, console=Console(file=buf, force_terminal=True, width=300))
    agent = Agent(name="a", model="m", instructions="sys")
    async with (
        ScriptedServer([Reply.error(400, EVIL)]) as srv,
        HTTPTransport(srv.base_url) as transport,
    ):
        await Fleet(transport, callbacks=[view]).run([agent.session("hi")])
    assert view.last_error is not None
    assert "bad request\\x1b]0;PWNED\\x07\\x1b[2J" in view.last_error
    view.console.print(view.render())
    shown = buf.getvalue()
    assert "bad request\\x1b]0;PWNED" in shown
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x07" not in shown


def test_a_last_error_set_from_outside_is_escaped_when_drawn() -> None:
    buf = io.StringIO()
    view = LiveView(total_sessions=1, console=Console(file=buf, force_terminal=True, width=300))
    view.last_error = EVIL
    view.last_retry = "a: \x1b]8;;http://x\x07link"
    view.console.print(view.render())
    shown = buf.getvalue()
    assert "\\x1b]0;PWNED" in shown and "\\x1b]8;;http://x\\x07link" in shown
    assert "\x1b]" not in shown and "\x07" not in shown
