"""The run store pages' opening snippets run as they are, and leave nothing open: they
used to make a store and never close it — the SQLite one's writer thread, journal segment
and ``-wal``/``-shm`` files stayed until the process ended (``async with`` closes it, as
docs/guide.md's snippet does)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent
from agentflow.testing import MockTransport, Reply

DOCS = Path(__file__).parents[2] / "docs"


def _snippet(page: str, marker: str) -> str:
    (code,) = [
        str(c)
        for c in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
        if marker in c
    ]
    return code


async def _run(code: str, namespace: dict[str, Any]) -> None:
    """``code`` with its top-level awaits, in ``namespace``."""
    compiled = compile(code, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    coro = eval(compiled, namespace)
    if coro is not None:
        await coro


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _given() -> dict[str, Any]:
    """What the snippets take as given: a transport, sessions, their agents."""
    agent = Agent(name="a", model="m")
    return {
        "transport": MockTransport(lambda _: Reply.text("hi")),
        "sessions": [agent.session("q", session_id="s0"), agent.session("r", session_id="s1")],
        "agents": [agent],
    }


async def test_the_store_pages_first_snippet_closes_its_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _snippet("store.md", 'SQLiteStore("runs.db")')
    # Its "..." stands for the time between the run and its resume.
    code = code.replace("\n...\n", "\nrun_id = result.run_id\n")
    monkeypatch.chdir(tmp_path)
    namespace = _given()
    await _run(code, namespace)
    assert [s.status for s in namespace["result"].sessions] == ["completed", "completed"]
    assert namespace["result"].run_id == namespace["run_id"]
    # Closed: the database alone is left (no journal segment, no -wal or -shm file).
    assert _files(tmp_path) == ["runs.db"]


async def test_the_postgres_pages_snippet_closes_its_store(postgres_db: str) -> None:
    from agentflow import Fleet
    from agentflow.store import PostgresStore

    given = _given()
    async with PostgresStore(postgres_db) as store:
        first = await Fleet(given["transport"], store=store).run(given["sessions"])
    code = _snippet("store-postgres.md", "PostgresStore(").replace(
        '"postgresql://worker@db.internal/runs"', repr(postgres_db)
    )
    namespace = {**_given(), "run_id": first.run_id}
    await _run(code, namespace)
    assert namespace["result"].run_id == first.run_id
    store = namespace["store"]
    assert isinstance(store, PostgresStore)
    with pytest.raises(Exception, match="closed"):  # closed by its `async with`
        await store.runs()
