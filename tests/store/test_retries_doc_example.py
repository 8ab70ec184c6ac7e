"""docs/store.md's known gap, as its example puts it: a session whose only turn failed
after 3 tries (the first and 2 retries) counts 2 retries live and 0 stored. The example
used to say 3 live: three tries are two retries."""

from __future__ import annotations

import re
from pathlib import Path

from agentflow import Agent, Fleet, RetryPolicy
from agentflow.demo.summary import build_report
from agentflow.stats import RunJournal
from agentflow.store import SQLiteStore, export_report
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import HTTPTransport

DOC = Path(__file__).parents[2] / "docs" / "store.md"


async def test_the_docs_example_counts_the_retries_the_run_counts(tmp_path: Path) -> None:
    text = " ".join(DOC.read_text().split())
    m = re.search(r"failed after 3 tries[^:]*: (\d+) live, (\d+) stored", text)
    assert m, "the example is gone from docs/store.md"
    agent = Agent(name="a", model="m", instructions="sys")
    retry = RetryPolicy(max_attempts=3, backoff_s=0.001, jitter=False, give_up_after_s=None)
    db = tmp_path / "runs.db"
    async with (
        ScriptedServer([Reply(status=500, frames=[b"x"])] * 3) as server,
        HTTPTransport(server.base_url) as transport,
        SQLiteStore(db) as store,
    ):
        journal = RunJournal()
        fleet = Fleet(transport, store=store, callbacks=[journal], retry=retry)
        live = await fleet.run([agent.session("x", session_id="s0")], run_id="r")
        stored = await export_report(store, "r")
    assert live.sessions[0].status == "error"
    live_report = build_report(live, run={}, journal=journal)
    assert live_report["agents"][0]["retries"] == int(m[1])
    assert stored["agents"][0]["retries"] == int(m[2])
