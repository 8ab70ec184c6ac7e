"""A fleet run with known credentials leaks them through no exit path.

The server here is real (aiohttp on loopback) and hostile in the ways real ones are:
it echoes the credentials it received in a 401's message, in a 500's, inside an open
stream's error object and in a malformed chunk. The client is configured with every
kind of credential: an ``api_key`` (sent as ``Authorization: Bearer``), an ``api-key``
header and a password in the base URL's userinfo. The run goes through every exit
path — DEBUG logs, session errors (``str``, ``repr``, tracebacks, ``.body``,
``.payload``), every event, the fleet result, replica names, the JSON and HTML
reports, the CSV, the Prometheus exposition, the live view, the demo's report and the
bench's output — and none of the secrets may appear in any of them, while the masks (``***``) must.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import socket
import sys
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from aiohttp import web
from rich.console import Console

from agentflow import (
    Agent,
    APIStatusError,
    Endpoint,
    Fleet,
    FleetResult,
    HTTPTransport,
    Replica,
    RetryPolicy,
    StreamProtocolError,
)
from agentflow._redact import _forget_all, display_url
from agentflow.report import LiveView, write_report
from agentflow.stats import FleetStats, PrometheusExporter, TurnCSVWriter
from agentflow.testing import Reply
from agentflow.transport import AiohttpTransport
from agentflow.typing import Transport

KEY = "sk-live-KEY-7f3a9c2e5b1d"  # the api_key: Authorization: Bearer KEY
HEADER_KEY = "azure-HDR-4e8b2a6c9d0f"  # the api-key header
USER = "fleetuser"
SECRET = "pw-SECRET-1c5e9a3b7d"  # the password in the URL's userinfo
BASIC = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()  # what aiohttp sends for it
SECRETS = (KEY, HEADER_KEY, SECRET, BASIC)


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    """Each test proves its own registrations; none is left for the next test."""
    _forget_all()
    yield
    _forget_all()


class EchoServer:
    """An OpenAI-compatible server that answers by the task's first word, echoing the
    credentials it received wherever the answer has room for text."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.received: list[dict[str, str]] = []
        self.port = 0
        #: Refuse every request (401 with the echo), whatever the task.
        self.deny_all = False
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> EchoServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        task = str(body["messages"][-1]["content"])
        kind = "denied" if self.deny_all else task.split()[0]
        self.attempts[task] += 1
        self.received.append(dict(request.headers))
        echo = (
            f"Authorization: {request.headers.get('Authorization')}; "
            f"api-key: {request.headers.get('api-key')}"
        )
        if kind == "denied":
            return _json(401, f"Incorrect API key provided ({echo})")
        first = self.attempts[task] == 1
        if kind == "flaky" and first:  # retried: the retry log and RetryEvent see it
            return _json(500, f"upstream rejected {echo}", {"Retry-After": "0"})
        if kind == "instream" and first:  # an error object inside a 200 stream
            err = {"error": {"message": f"key check failed for {echo}", "code": 503}}
            return await _stream(request, [b"data: " + json.dumps(err).encode() + b"\n\n"])
        if kind == "garbage":  # a malformed chunk: StreamProtocolError keeps its payload
            return await _stream(request, [f"data: {{not json {echo}\n\n".encode()])
        return await _stream(request, Reply.text(f"done with {task}").frames)


def _json(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    error = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(error, status=status, headers=headers)


async def _stream(request: web.Request, frames: Sequence[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for frame in frames:
        await resp.write(frame)
    await resp.write_eof()
    return resp


def _closed_port() -> int:
    """A loopback port nothing listens on (a dead replica: ConnectError, failover)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _no_wait(_: float) -> None:
    """Retries wait on this instead of the wall clock."""


TASKS = ["ok one", "ok two", "denied three", "flaky four", "instream five", "garbage six"]


@pytest.fixture
async def server() -> AsyncIterator[EchoServer]:
    """The echoing server, up for one test."""
    async with EchoServer() as srv:
        yield srv


def _every_text(
    result: FleetResult,
    events: list[str],
    fleet: Fleet,
    transports: list[Transport],
    stats: FleetStats,
    prom: PrometheusExporter,
    csv: io.StringIO,
    live: LiveView,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    url: str,
) -> dict[str, str]:
    """Everything a user could print, log or write after the run, by where it came from."""
    out: dict[str, str] = {
        "logs": caplog.text + "\n".join(r.getMessage() for r in caplog.records),
        "events": "\n".join(events),
        "fleet_result": repr(result) + str(result),
        "replicas": repr(fleet.replicas) + repr([r.name for r in result.replicas]),
        "transports": "\n".join(repr(t) + t.endpoint for t in transports),
        "traces": "\n".join(
            repr(t.trace) + t.trace.endpoint for s in result.sessions for t in s.turns
        ),
        "prometheus": prom.text(),
        "csv": csv.getvalue(),
    }
    for s in result.sessions:
        err = s.error
        if err is None:
            continue
        parts = [str(err), repr(err), "".join(traceback.format_exception(err))]
        parts += [repr(getattr(err, a, None)) for a in ("body", "payload", "endpoint", "trace")]
        out[f"error {s.session_id}"] = "\n".join(parts)
    report = stats.report(run={"base_url": url, "server": url}, include_samples=True)
    out["report.json"] = json.dumps(report)
    html = tmp_path / "report.html"
    write_report([report], html)
    out["report.html"] = html.read_text("utf-8")
    console = Console(file=io.StringIO(), width=200)
    console.print(live.render())
    out["live view"] = console.file.getvalue()  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("kind", ["http-bearer", "http", "aiohttp"])
async def test_no_secret_leaves_a_fleet_run(
    kind: str, server: EchoServer, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Every exit path of a run is free of every credential, and the masks show it ran."""
    caplog.set_level(logging.DEBUG)
    url = f"http://{USER}:{SECRET}@127.0.0.1:{server.port}/v1"
    dead = f"http://{USER}:{SECRET}@127.0.0.1:{_closed_port()}/v1"
    transports: list[Transport]
    if kind == "http-bearer":
        # A Bearer key (userinfo and a key together are refused: which one would count?).
        transports = [
            HTTPTransport(
                Endpoint(base_url=display_url(u), api_key=KEY, headers={"api-key": HEADER_KEY})
            )
            for u in (url, dead)
        ]
    else:
        # Userinfo goes as Basic auth, from either transport.
        cls = HTTPTransport if kind == "http" else AiohttpTransport
        transports = [
            cls(Endpoint(base_url=u, headers={"api-key": HEADER_KEY})) for u in (url, dead)
        ]
    events: list[str] = []
    stats = FleetStats(per="session", keep_samples=True)
    prom = PrometheusExporter()
    csv = io.StringIO()
    live = LiveView(len(TASKS), console=Console(file=io.StringIO()))
    fleet = Fleet(
        [Replica(transport=t) for t in transports],
        callbacks=[lambda e: events.append(repr(e)), stats, prom, TurnCSVWriter(csv), live],
        retry=RetryPolicy(max_attempts=6, jitter=False, backoff_s=0.0),
        sleep=_no_wait,
    )
    agent = Agent(name="keyholder", model="m", max_turns=2)
    try:
        result = await asyncio.wait_for(
            fleet.run(agent.session(t, session_id=t.replace(" ", "-")) for t in TASKS), 60
        )
    finally:
        for t in transports:
            await t.aclose()

    # The run went where it should: the credentials reached the server, and each
    # session ended the way its task asked.
    assert server.received
    first = server.received[0]
    if kind == "http-bearer":
        assert first["Authorization"] == f"Bearer {KEY}"
    else:
        assert first["Authorization"] == f"Basic {BASIC}"
    assert first["api-key"] == HEADER_KEY
    status = {s.session_id: s.status for s in result.sessions}
    assert status == {
        "ok-one": "completed",
        "ok-two": "completed",
        "denied-three": "error",
        "flaky-four": "completed",
        "instream-five": "completed",
        "garbage-six": "error",
    }
    denied = next(s.error for s in result.sessions if s.session_id == "denied-three")
    garbage = next(s.error for s in result.sessions if s.session_id == "garbage-six")
    assert isinstance(denied, APIStatusError) and denied.status == 401
    assert isinstance(garbage, StreamProtocolError) and garbage.payload is not None
    assert result.retries >= 2  # flaky and instream were retried (and dead-replica failovers)
    assert result.replicas[1].failures >= 1  # ConnectErrors from the dead replica, failed over

    texts = _every_text(
        result, events, fleet, transports, stats, prom, csv, live, caplog, tmp_path, url
    )
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked through {where}"
        assert f"{USER}:" not in text, f"userinfo leaked through {where}"
    # The masks prove the echoes were there and were caught, path by path.
    assert "***" in str(denied) and "***" in json.dumps(denied.body)
    assert b"***" in garbage.payload
    for where in ("logs", "events", "report.json", "error denied-three"):
        assert "***" in texts[where], where
    assert "turn.retry" in texts["logs"] and "session.failed" in texts["logs"]
    assert "ConnectError" in texts["logs"]
    assert f"127.0.0.1:{server.port}" in texts["replicas"]  # named by host, not by userinfo


async def test_demo_report_and_output_hold_no_secret(server: EchoServer, tmp_path: Path) -> None:
    """``agentflow demo`` against a server that rejects and echoes the credentials (the
    URL's userinfo, sent as Basic auth): its printed output and its JSON report name the
    server, never the URL's password in any form."""
    report_path = tmp_path / "demo.json"
    url = f"http://{USER}:{SECRET}@127.0.0.1:{server.port}/v1"
    server.deny_all = True
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentflow.cli", "demo", "--agents", "2", "--turns", "1:1",
        "--no-live", "--base-url", url, "--report", str(report_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    output = stdout.decode() + stderr.decode()
    assert proc.returncode == 1, output[-3000:]  # 1: sessions failed (all were refused)
    assert "report written" in output
    assert server.received and server.received[0]["Authorization"] == f"Basic {BASIC}"
    report = report_path.read_text()
    data = json.loads(report)
    assert data["fleet"]["failed"] == 2  # every session was refused with the echo
    errors = [a["error"] for a in data["agents"]]
    assert all(e and "401" in e and "***" in e for e in errors), errors
    assert data["run"]["server"] == f"http://127.0.0.1:{server.port}/v1"
    for where, text in (("output", output), ("report", report)):
        for secret in (KEY, SECRET):
            assert secret not in text, f"{secret!r} leaked through the demo's {where}"
        assert f"{USER}:" not in text, where


async def test_bench_output_and_report_hold_no_secret(server: EchoServer, tmp_path: Path) -> None:
    """``agentflow bench --base-url`` with a password in the URL's userinfo: the line
    it starts with names the server by host, as its report does — it printed the URL as
    given, password and all."""
    report_path = tmp_path / "bench.json"
    url = f"http://{USER}:{SECRET}@127.0.0.1:{server.port}/v1"
    server.deny_all = True
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentflow.cli", "bench", "--base-url", url, "--model", "m",
        "--workload", "short", "--rate", "2", "--arrival", "constant", "--duration", "1",
        "--warmup", "0", "--report", str(report_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    output = stdout.decode() + stderr.decode()
    assert proc.returncode == 1, output[-3000:]  # 1: sessions failed (all were refused)
    assert server.received  # the run did reach the server
    shown = f"http://127.0.0.1:{server.port}/v1"
    assert f"agentflow bench: short on {shown}" in output
    report = report_path.read_text()
    assert json.loads(report)["run"]["target"] == shown
    for where, text in (("output", output), ("report", report)):
        for secret in (SECRET, BASIC):
            assert secret not in text, f"{secret!r} leaked through the bench's {where}"
        assert f"{USER}:" not in text, where
