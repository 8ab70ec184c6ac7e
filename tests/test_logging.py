"""Log lines carry agent, session and turn; an API key never appears in one."""

from __future__ import annotations

import logging

import pytest

from agentflow import Agent, Endpoint, HTTPTransport
from agentflow._logging import get_logger
from agentflow.testing import Reply, ScriptedServer

KEY = "sk-live-DO-NOT-LOG-0123456789"


async def test_context_bound_and_key_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A failing run logs its failure with agent and session bound, and no trace of the key."""
    caplog.set_level(logging.DEBUG, logger="agentflow")
    replies = [Reply.text("hi"), Reply.error(401, f"bad key Bearer {KEY}")]
    async with (
        ScriptedServer(replies) as srv,
        HTTPTransport(Endpoint(base_url=srv.base_url, api_key=KEY)) as t,
    ):
        agent = Agent(name="keyed", model="m")
        ok = await agent.run("a", t)
        failed = await agent.run("b", t)
    assert ok.ok and failed.status == "error"
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "agent='keyed'" in text and "turn=0" in text and "session.failed" in text
    assert KEY not in text


def test_redaction_of_secret_fields() -> None:
    """Fields named like credentials are masked whatever their value."""
    records: list[str] = []

    class H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("agentflow.test_redact")
    logger.addHandler(H())
    logger.setLevel(logging.INFO)
    get_logger("agentflow.test_redact").info(
        "x", api_key=KEY, headers=f"Authorization: Bearer {KEY}"
    )
    assert records and KEY not in records[0] and "api_key='***'" in records[0]
