"""The store from the command line (demo --store, resume, report --store), and over real
HTTP: an API key never reaches the database file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agentflow import Fleet
from agentflow.cli import main
from agentflow.sim import TextGenConfig
from agentflow.sim.server import SimServer
from agentflow.store import SQLiteStore
from agentflow.transport import Endpoint, HTTPTransport

from .fleets import agents

SECRET = "sk-agentflow-store-test-5e3cr3t-key-0123456789"


async def test_an_api_key_is_never_stored(tmp_path: Path) -> None:
    """A fleet over real loopback HTTP with an API key: the key's bytes are in no file
    of the store (database, WAL), though every turn is."""
    path = tmp_path / "runs.db"
    team = agents()
    async with SimServer(
        "cpu-tiny", textgen=TextGenConfig(tool_rounds=2, answer_tokens=(4, 8)), time_scale=0.01
    ) as sim:
        endpoint = Endpoint(base_url=sim.base_url, api_key=SECRET)
        store = SQLiteStore(path)
        async with HTTPTransport(endpoint) as transport:
            fleet = Fleet(transport, store=store)
            result = await fleet.run(
                [team[i % 3].session(f"task {i}") for i in range(6)],
                run_config={"note": "no secrets here"},
            )
        await store.flush()  # the WAL still holds the data: read it before it is checkpointed
        raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # noqa: ASYNC240
        await store.aclose()
    assert all(s.ok for s in result.sessions), [s.error for s in result.sessions]
    raw += path.read_bytes()
    assert SECRET.encode() not in raw
    assert b"Bearer" not in raw
    conn = sqlite3.connect(path)
    ((turns,),) = conn.execute("SELECT COUNT(*) FROM turns")
    conn.close()
    assert turns == sum(len(s.turns) for s in result.sessions) >= 12


def test_demo_store_resume_and_report(tmp_path: Path, capsys: object) -> None:
    """`agentflow demo --virtual --store` records a run with its config; `agentflow report
    --store` exports it as the demo's report; `agentflow resume` of the finished run
    runs nothing and reports the same turns; an unknown run is an error."""
    db = tmp_path / "runs.db"
    first = tmp_path / "first.json"
    argv = ["demo", "--virtual", "--agents", "6", "--turns", "2:4", "--no-live"]
    assert main([*argv, "--store", str(db), "--report", str(first)]) == 0
    report = json.loads(first.read_text())
    run_id = report["run"]["run_id"]
    exported = tmp_path / "exported.json"
    assert main(["report", "--store", str(db), run_id, "--json", str(exported)]) == 0
    back = json.loads(exported.read_text())
    assert back["run"]["run_id"] == run_id and back["run"]["status"] == "finished"
    assert back["run"]["demo"]["agents"] == 6
    assert back["fleet"]["turns"] == report["fleet"]["turns"]
    assert back["fleet"]["sessions"] == 6
    again = tmp_path / "again.json"
    assert main(["resume", run_id, "--store", str(db), "--no-live", "--report", str(again)]) == 0
    resumed = json.loads(again.read_text())
    assert resumed["fleet"]["turns"] == report["fleet"]["turns"]
    assert main(["resume", "no-such-run", "--store", str(db), "--no-live"]) == 1
    assert main(["report", "--store", str(tmp_path / "missing.db"), run_id]) == 2
