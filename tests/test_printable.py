"""Server text shown on a terminal: control characters escaped, not sent.

An error message quoting a server (a 400's body) reached the terminal as it was: an
``ESC ] 0 ; … BEL`` retitled the window, ``ESC [ 2 J`` cleared the screen — in
``agentflow chat``'s retry lines and its error line, ``bench``'s failure lines and the
live view's last error (rich's ``Text`` strips BEL, BS, VT, FF and CR only). The
commands run for real, in a child Python, against a :class:`ScriptedServer`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agentflow._printable import printable
from agentflow.testing import Reply, ScriptedServer

from .test_chat_retry_cli import ENV, chat_piped, finish

EVIL = "nope\x1b]0;PWNED\x07\x1b[2J\x9b31m [/x]"


def test_control_characters_are_escaped_newlines_and_tabs_kept() -> None:
    assert printable(EVIL) == "nope\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m [/x]"
    assert printable("a\tb\nc\rd\x7f") == "a\tb\nc\\x0dd\\x7f"
    # a CRLF line end (an HTML error page) is a newline; a lone CR still overwrites: escaped
    assert printable("<html>\r\n<head>\r\n\rx") == "<html>\n<head>\n\\x0dx"
    assert printable("plain · ünïcode") == "plain · ünïcode"
    assert printable(printable(EVIL)) == printable(EVIL)  # escaping twice changes nothing


async def test_chat_retry_and_error_lines_escape_the_servers_text() -> None:
    async with ScriptedServer([Reply.error(503, "busy" + EVIL), Reply.error(400, EVIL)]) as srv:
        code, _, err = await chat_piped(srv.base_url)
    text = err.decode()
    assert code == 1, text
    retry, error = text.splitlines()
    assert retry.startswith("agentflow: attempt 1 failed") and "busynope\\x1b]0;PWNED" in retry
    assert error.startswith("agentflow chat: ") and "nope\\x1b]0;PWNED\\x07\\x1b[2J" in error
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text


async def _failing_command(*args: str, replies: int) -> tuple[int | None, str, str]:
    """``agentflow ARGS --base-url URL`` against a server whose every answer is a 400
    with EVIL as its message: the exit code, stdout and stderr."""
    async with ScriptedServer() as srv:
        srv.add(*(Reply.error(400, EVIL) for _ in range(replies)))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentflow.cli", *args, "--base-url", srv.base_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        out, err = await finish(
            proc,
            asyncio.ensure_future(proc.stdout.read()),
            asyncio.ensure_future(proc.stderr.read()),
        )
    return proc.returncode, out.decode(), err.decode()


async def test_bench_failure_lines_escape_the_servers_text(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    code, printed, err = await _failing_command(
        "bench", "--model", "m", "--rate", "4", "--duration", "1", "--warmup", "0",
        "--report", str(report), replies=50,
    )  # fmt: skip
    assert code == 1, printed + err
    # The report keeps what the server said; the terminal gets it escaped.
    assert any(EVIL in line for line in json.loads(report.read_text())["levels"][0]["failures"])
    assert "nope\\x1b]0;PWNED\\x07\\x1b[2J" in printed
    assert "\x1b" not in printed and "\x07" not in printed


async def test_demo_failure_lines_escape_the_servers_text(tmp_path: Path) -> None:
    """``agentflow demo``'s "sessions failed" lines under its summary, as ``bench``'s."""
    _, printed, err = await _failing_command(
        "demo", "--model", "m", "--agents", "1", "--turns", "1:1", "--no-live",
        "--report", str(tmp_path / "demo.json"), replies=20,
    )  # fmt: skip
    assert "sessions failed" in printed or "session failed" in printed, printed + err
    assert "nope\\x1b]0;PWNED\\x07\\x1b[2J" in printed
    assert "\x1b" not in printed and "\x07" not in printed and "\x9b" not in printed
