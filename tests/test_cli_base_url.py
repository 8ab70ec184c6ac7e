"""A malformed server URL given to a command is one line naming where it came from —
``--base-url``, or for ``chat`` without the flag ``$OPENAI_BASE_URL`` — exit 2. It used
to name the library field it goes to ("Endpoint.base_url must be …"), which the user
never typed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agentflow.testing import Reply, ScriptedServer

from .test_cli_errors import assert_one_line, run
from .wait import GUARD_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["chat", "--model", "m", "--base-url", "ftp://x", "hi"], "such as"),
        (["demo", "--no-live", "--base-url", "localhost:8000/v1"], "such as"),
        (["bench", "--rate", "1", "--base-url", "http://h:99999/v1"], "from 1 to 65535"),
        (["resume", "r1", "--store", "none.db", "--base-url", "http://h:0/v1"], "from 1 to 65535"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_a_bad_base_url_names_the_flag(
    argv: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    code, err = run(*argv)
    assert code == 2, err
    assert_one_line(err, f"agentflow {argv[0]}", "error: --base-url must be an http(s) URL", says)
    assert "Endpoint" not in err


def test_a_bad_url_from_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8000/v1")
    code, err = run("chat", "--model", "m", "hi")
    assert code == 2, err
    assert_one_line(err, "agentflow chat", "error: $OPENAI_BASE_URL must be", "'localhost:8000/v1'")
    code, err = run("chat", "--model", "m", "--base-url", "ftp://y", "hi")  # the flag wins
    assert code == 2, err
    assert_one_line(err, "agentflow chat", "error: --base-url must be", "'ftp://y'")


async def test_chat_still_takes_its_server_from_the_environment() -> None:
    async with ScriptedServer([Reply.text("hello")]) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentflow.cli", "chat", "--model", "m", "hi",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "OPENAI_BASE_URL": srv.base_url, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), GUARD_S)
        srv.assert_complete()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "hello\n"
