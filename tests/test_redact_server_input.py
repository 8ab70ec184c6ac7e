"""Redaction of text a server chose: it costs work in proportion to the text, and it
holds for any shape or depth the server sends.

:func:`redact` runs on every error message, whose text may be a server's; the work it
does is checked here without a clock, in a child process stopped by a generous hang
guard (a regular expression gives no step count to assert on).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentflow import (
    Agent,
    BadRequestError,
    Endpoint,
    HTTPTransport,
    UnexpectedContentType,
    redact,
)
from agentflow._redact import display_url
from agentflow.testing import Reply, ScriptedServer
from tests.wait import GUARD_S

KEY = "sk-proj-UNIT-CUT-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
PREFIX = KEY[:8]  # what a cut through the key used to leave

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter under the hang guard; its stdout."""
    env = {**os.environ, "PYTHONPATH": _ROOT}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=GUARD_S
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_long_run_of_scheme_characters_before_an_at_sign_is_redacted_in_linear_work() -> None:
    """``a.a.a…@`` (1 MB) used to backtrack from every word boundary: 32 KB took 2.8 s,
    a 48 KB error message stalled its session for 20 s, 1 MB would take an hour."""
    out = _in_child(
        "from agentflow import redact\n"
        "t = 'a.' * 500_000 + '@'\n"
        "print(redact(t) == t, redact('x://' + t) == 'x://')\n"
    )
    assert out.split() == ["True", "True"]


def test_userinfo_is_dropped_after_any_scheme() -> None:
    assert redact("see http://u:pw@host:1/v1 end") == "see http://host:1/v1 end"
    assert redact("HTTPS://A:B@h/x, git+ssh://g:s@h:x") == "HTTPS://h/x, git+ssh://h:x"
    assert redact("1http://u:p@h/") == "1http://h/"  # a scheme glued to a word
    for same in ("me@example.com", "http://h/a@b", "a://b c@d"):
        assert redact(same) == same
    assert display_url("http://u:p@ss@h:1/v1") == "http://h:1/v1"


async def _error_of(reply: Reply) -> object:
    async with (
        ScriptedServer([reply]) as srv,
        HTTPTransport(Endpoint(base_url=srv.base_url, api_key=KEY)) as t,
    ):
        res = await Agent(name="a", model="m", instructions="s").session("hi").run(t)
    return res.error


@pytest.mark.parametrize("at", [280, 295])
async def test_a_key_across_the_cut_of_a_page_is_masked_whole(at: int) -> None:
    """A 2xx HTML page quoted in the message (its first 300 characters) and kept as
    ``payload`` (500 bytes): each is cut after the body is redacted, not before."""
    page = "<html>" + "x" * (at - 6) + KEY + " " + "y" * (500 - at - len(KEY)) + KEY + "</html>"
    err = await _error_of(Reply(frames=[page.encode()], headers={"Content-Type": "text/html"}))
    assert isinstance(err, UnexpectedContentType)
    assert PREFIX not in str(err) and "***" in str(err)
    assert err.payload is not None and PREFIX.encode() not in err.payload


async def test_a_key_across_the_cut_of_a_text_error_body_is_masked_whole() -> None:
    """A 4xx body that is not JSON: its first 300 characters are the message."""
    body = "x" * 285 + " bad key " + KEY  # the key from character 294 on
    err = await _error_of(Reply(frames=[body.encode()], status=400))
    assert isinstance(err, BadRequestError)
    assert PREFIX not in str(err) and "bad key ***" in str(err)
