"""A tool's output holding a lone surrogate — what ``os.fsdecode`` makes of a file
name's undecodable bytes — is sent with U+FFFD in its place: the session goes on (it
used to end in an error, the request could not be encoded), and the run's store keeps
the result (it used to fail the commit)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from agentflow import Agent, Fleet, HTTPTransport
from agentflow._sendable import sendable_text
from agentflow.store import SQLiteStore
from agentflow.testing import Reply, ScriptedServer


def list_files(path: str) -> str:
    """List a directory's files.

    Args:
        path: the directory.
    """
    return f"{path}/caf\udce9.txt\n{path}/\ud83d\ude00.md"  # as os.fsdecode and a split pair


def test_lone_surrogates_become_replacement_characters_and_pairs_are_joined() -> None:
    assert sendable_text("caf\udce9") == "caf\ufffd"
    assert sendable_text("\ud83d\ude00 and \ud800") == "\U0001f600 and \ufffd"
    text = "héllo, 世界"
    assert sendable_text(text) is text  # text that can be sent is returned as it is
    assert sendable_text("plain") == "plain"


async def test_a_tool_output_with_a_lone_surrogate_is_sent_and_stored(tmp_path: Path) -> None:
    agent = Agent(name="a", model="m", tools=[list_files])
    store = SQLiteStore(tmp_path / "run.db")
    async with (
        ScriptedServer([Reply.tool_call("list_files", {"path": "src"}), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await Fleet(http, store=store).run([agent.session("go")], run_id="r")
        srv.assert_complete()
    await store.aclose()
    (session,) = result.sessions
    assert session.status == "completed", session.error
    (msg,) = [m for m in srv.requests[1].body["messages"] if m["role"] == "tool"]
    assert msg["content"] == "src/caf\ufffd.txt\nsrc/\U0001f600.md"
    rows = await asyncio.to_thread(
        lambda: (
            sqlite3.connect(tmp_path / "run.db").execute("SELECT output FROM tool_calls").fetchall()
        )
    )
    assert rows == [(msg["content"],)]
