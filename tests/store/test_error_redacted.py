"""A session's error and a turn's failed attempts, as the store records them: registered
secrets masked, as the JSON report masks them.

Only an :class:`~agentflow.AgentflowError` masks its message (when it is built), so a
custom transport's ``RuntimeError("… KEY")`` — or a transport error whose ``__str__``
quotes the key — went into ``runs.db`` as it was, though docs/store.md says keys are
never recorded. The files are read back whole, byte by byte.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentflow import Agent, ConnectError, Fleet, register_secret
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest

KEY = "corp-gw-token-SECRET-5566"


class _Holder:
    """The secret's owner: registered for the test only, forgotten when it goes."""


class GatewayDown(ConnectError):
    """A custom transport's error that names the credential in its ``__str__``."""

    def __init__(self, credential: str) -> None:
        super().__init__("gateway down")
        self.credential = credential

    def __str__(self) -> str:
        return f"gateway down for credential {self.credential}"


def files_hold_key(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.is_file() and KEY.encode() in p.read_bytes()]


async def test_a_session_error_quoting_a_registered_key_is_stored_masked(tmp_path: Path) -> None:
    holder = _Holder()
    register_secret(KEY, owner=holder)

    def handler(request: ChatRequest) -> Reply:
        raise RuntimeError(f"gateway refused credential {KEY}")

    agent = Agent(name="a", model="m", instructions="sys")
    async with SQLiteStore(tmp_path / "runs.db") as store:
        result = await Fleet(MockTransport(handler), store=store).run([agent.session("x")])
    assert result.sessions[0].status == "error"
    (error,) = sqlite3.connect(tmp_path / "runs.db").execute("select error from sessions")
    assert error[0] == "RuntimeError: gateway refused credential ***"
    assert files_hold_key(tmp_path) == []
    del holder


async def test_a_failed_attempt_quoting_a_registered_key_is_stored_masked(
    tmp_path: Path,
) -> None:
    holder = _Holder()
    register_secret(KEY, owner=holder)
    calls = 0

    def handler(request: ChatRequest) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise GatewayDown(KEY)  # retried: a ConnectError
        return Reply.text("hi")

    agent = Agent(name="a", model="m", instructions="sys")
    async with SQLiteStore(tmp_path / "runs.db") as store:
        result = await Fleet(MockTransport(handler), store=store).run([agent.session("x")])
    assert result.sessions[0].status == "completed" and calls == 2
    (failures,) = sqlite3.connect(tmp_path / "runs.db").execute("select failures from turns")
    assert "gateway down for credential ***" in failures[0]
    assert files_hold_key(tmp_path) == []
    del holder
