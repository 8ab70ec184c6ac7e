"""Retries as the store keeps them: a stored run, its export and its resumption count
the retries the live run counted — per turn (the stored turns' failed attempts, which
used to read 0) and in all (the retries of a turn that finally failed, which no turn
records: the attempt's end records the runner's count; they used to be lost)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from agentflow import Fleet, FleetResult
from agentflow.sched import RetryPolicy
from agentflow.store import SQLiteStore, export_report, load_result
from agentflow.testing import Reply
from agentflow.transport import HTTPTransport

from .fleets import agents

RETRY = RetryPolicy(max_attempts=3, backoff_s=0.001, jitter=False, give_up_after_s=None)


class FlakyServer:
    """An OpenAI-compatible server on loopback: each request's first attempt fails (500),
    the retry answers — a tool call on a task's first turn, then text; while ``doom``
    is set, a task that says ``doomed`` fails every attempt."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.doom = True
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> FlakyServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        messages = body["messages"]
        task = next(str(m["content"]) for m in messages if m["role"] == "user")
        key = json.dumps(messages, sort_keys=True)
        self.seen[key] += 1
        if (self.doom and "doomed" in task) or self.seen[key] == 1:
            reply = Reply.error(500, "flaky")
        elif any(m["role"] == "tool" for m in messages):
            reply = Reply.text("done")
        else:
            reply = Reply.tool_call("lookup", {"key": task}, call_id=f"call-{len(self.seen)}")
        if reply.status != 200:
            return web.Response(body=b"".join(reply.frames), status=reply.status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in reply.frames:
            await resp.write(frame)
        await resp.write_eof()
        return resp


def _per_session(result: FleetResult) -> dict[str, list[int]]:
    return {s.session_id: [len(t.failed_attempts) for t in s.turns] for s in result.sessions}


async def test_stored_and_resumed_runs_count_the_live_retries(tmp_path: Path) -> None:
    """Three sessions whose every request fails once, and one that fails every attempt
    (two retries, then the session ends in error): the stored result and the exported
    report count the live run's retries, per turn and in all; a resume (which runs the
    failed session again, now answered after one retry of its second turn) adds its
    own retries to them."""
    path = tmp_path / "runs.db"
    team = agents(2)
    tasks = ["task 0", "task 1", "doomed task", "task 3"]
    sessions = [team[i % 2].session(t, session_id=f"s{i}") for i, t in enumerate(tasks)]
    async with FlakyServer() as server, HTTPTransport(server.base_url) as transport:
        store = SQLiteStore(path)
        try:
            live = await Fleet(transport, store=store, retry=RETRY).run(sessions, run_id="r")
        finally:
            await store.aclose()
        # 3 sessions x 2 turns retried once each, and the doomed turn's 2 retries.
        assert live.retries == 3 * 2 + 2
        assert [s.status for s in live.sessions] == ["completed"] * 2 + ["error", "completed"]
        async with SQLiteStore(path) as reader:
            stored = await load_result(reader, "r")
            report = await export_report(reader, "r")
        assert stored.retries == live.retries == report["fleet"]["retries"]
        assert _per_session(stored) == _per_session(live)
        assert [a["retries"] for a in report["agents"]] == [2, 2, 0, 2]
        attempt = stored.sessions[0].turns[0].failed_attempts[0]
        assert attempt.replica == transport.endpoint and "flaky" in str(attempt.error)

        server.doom = False
        store = SQLiteStore(path)
        try:
            resumed = await Fleet(transport, store=store, retry=RETRY).resume("r", agents=team)
        finally:
            await store.aclose()
    assert [s.status for s in resumed.sessions] == ["completed"] * 4
    assert resumed.retries == live.retries + 1
    done = _per_session(live)
    assert _per_session(resumed) == {**done, "s2": [0, 1]}
