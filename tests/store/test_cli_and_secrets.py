"""The store from the command line (demo --store, resume, report --store), and over real
HTTP: an API key never reaches the database file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path

import pytest

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


def _serve_sim(ready: threading.Event, stop: threading.Event, url: list[str]) -> None:
    """A simulator over loopback HTTP in its own thread (``main`` runs its own loop)."""

    async def serve() -> None:
        textgen = TextGenConfig(tool_rounds=1, answer_tokens=(4, 8))
        async with SimServer("deepseek-v4.1-flash-gb300", textgen=textgen, time_scale=0.01) as sim:
            url.append(sim.base_url)
            ready.set()
            await asyncio.to_thread(stop.wait)

    asyncio.run(serve())


def test_a_base_url_password_is_never_stored_and_resume_asks_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentflow demo --base-url http://user:PASSWORD@host/v1 --store`: the password
    (Basic auth) is in no file of the store — the run's config keeps the URL without it —
    and `agentflow resume` refuses to go on without it, saying how to give it
    (`--base-url`, which must name the recorded server)."""
    password = "pw-agentflow-basic-0123456789"
    ready, stop = threading.Event(), threading.Event()
    url: list[str] = []
    server = threading.Thread(target=_serve_sim, args=(ready, stop, url), daemon=True)
    server.start()
    try:
        assert ready.wait(60)
        plain = url[0].rstrip("/").removesuffix("/v1") + "/v1"
        with_auth = plain.replace("http://", f"http://alice:{password}@")
        db, first = tmp_path / "runs.db", tmp_path / "first.json"
        argv = ["demo", "--base-url", with_auth, "--model", "agentflow-sim", "--agents", "2",
                "--turns", "1:1", "--max-tokens", "16", "--no-live"]  # fmt: skip
        assert main([*argv, "--store", str(db), "--report", str(first)]) == 0
        run_id = json.loads(first.read_text())["run"]["run_id"]
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
        assert password.encode() not in raw and b"alice" not in raw
        conn = sqlite3.connect(db)
        ((config,),) = conn.execute("SELECT config FROM runs")
        conn.close()
        assert json.loads(config)["demo"]["base_url"] == plain
        capsys.readouterr()

        resume = ["resume", run_id, "--store", str(db), "--no-live"]
        assert main(resume) == 2
        err = capsys.readouterr().err
        assert "--base-url" in err and "credentials" in err and password not in err
        other = with_auth.replace("127.0.0.1", "localhost")
        assert main([*resume, "--base-url", other]) == 2
        assert "is not the server" in capsys.readouterr().err
        assert main([*resume, "--base-url", with_auth]) == 0
    finally:
        stop.set()
        server.join(30)
