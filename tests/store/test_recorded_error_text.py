"""A stored session's error reads as the live run's: ``"Type: message"`` in the report's
``agents[].error`` and in the failure lines — it read ``_Recorded: ServerError('…')``
(the store kept ``repr(error)``, read back wrapped in a private class). Rows an older
release wrote (``repr``) read back the same way."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentflow import Agent, Fleet, HTTPTransport, RetryPolicy
from agentflow._redact import error_line
from agentflow._redact import error_line as error_text
from agentflow.demo.summary import build_report, failure_lines
from agentflow.store import SQLiteStore, export_report, load_result
from agentflow.store._recorded_error import recorded_error
from agentflow.testing import Reply, ScriptedServer


async def test_a_stored_sessions_error_reads_as_the_live_ones(tmp_path: Path) -> None:
    agent = Agent(name="a", model="m", instructions="sys")
    db = tmp_path / "runs.db"
    async with (
        ScriptedServer([Reply(status=500, frames=[b"injected fault"])]) as server,
        HTTPTransport(server.base_url) as tr,
        SQLiteStore(db) as store,
    ):
        fleet = Fleet(tr, store=store, retry=RetryPolicy(max_attempts=1))
        live = await fleet.run([agent.session("x", session_id="s0")], run_id="r")
    assert live.sessions[0].status == "error"
    live_error = build_report(live, run={})["agents"][0]["error"]
    assert live_error.startswith("ServerError: ") and "500" in live_error
    (stored,) = sqlite3.connect(db).execute("select error from sessions").fetchone()
    assert stored == live_error
    async with SQLiteStore(db) as store:
        report = await export_report(store, "r")
        result = await load_result(store, "r")
    assert report["agents"][0]["error"] == live_error
    assert failure_lines(result) == failure_lines(live)
    assert "_Recorded" not in str(report) and "RecordedError" not in str(failure_lines(result))


def test_an_older_rows_repr_reads_back_as_type_and_message() -> None:
    old = recorded_error("ServerError('http://h/v1 answered 500: boom')")
    assert (type(old).__name__, str(old)) == ("ServerError", "http://h/v1 answered 500: boom")
    cut = recorded_error("RuntimeError('token *** refused)")  # no literal: kept as written
    assert (type(cut).__name__, str(cut)) == ("RuntimeError", "'token *** refused")
    new = recorded_error(error_text(ValueError("bad: input")))
    assert (type(new).__name__, str(new)) == ("ValueError", "bad: input")
    assert isinstance(recorded_error("no type at all"), Exception)


def test_an_error_with_an_empty_message_is_its_type_alone() -> None:
    """``KeyboardInterrupt()`` is stored as ``KeyboardInterrupt`` (not ``KeyboardInterrupt:
    ``, with a dangling colon) and reads back as that type with an empty message."""
    assert error_text(KeyboardInterrupt()) == "KeyboardInterrupt"
    back = recorded_error("KeyboardInterrupt")
    assert type(back).__name__ == "KeyboardInterrupt" and str(back) == ""
    assert error_line(back) == "KeyboardInterrupt"
