"""The requests ``agentflow demo --base-url`` makes before its run (the server's window, its
slots, its ``/metrics``) wait no longer than the ``--*-timeout`` flags let a model request
wait: against a server that accepts connections and never answers, they took 10 s, 5 s and
5 s whatever the flags said — ~20 s before the run's first request timed out in 0.2 s."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentflow.demo import _probes as demo_probes
from agentflow.demo import run as demo_run
from agentflow.demo._config import DemoConfig
from agentflow.demo._probes import probe_s
from agentflow.report import ServerWatch
from agentflow.transport import Timeouts


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback server that accepts connections, reads, and never answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


def test_probe_s_is_the_shortest_limit_a_request_answers_within() -> None:
    assert probe_s(None) == 5.0
    assert probe_s(None, 10.0) == 10.0
    assert probe_s(Timeouts(first_token=0.2), 10.0) == 0.2
    assert probe_s(Timeouts(idle=3, total=2)) == 2
    assert probe_s(Timeouts(connect=1)) == 5.0  # the defaults idle/total are longer


def test_the_demos_probes_take_the_flags_limit(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits: dict[str, float] = {}

    def spy(name: str, real: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            limits[name] = kwargs["timeout_s"]
            return real(*args, **kwargs)

        return recorded

    for module, name in ((demo_probes, "server_window"), (demo_run, "oversubscription")):
        monkeypatch.setattr(module, name, spy(name, getattr(module, name)))

    class Watch(ServerWatch):
        async def start(self, *, timeout_s: float | None = None) -> None:
            limits["ServerWatch.start"] = timeout_s  # type: ignore[assignment]
            limits["ServerWatch"] = self.timeout_s  # the scrapes during and after the run
            await super().start(timeout_s=timeout_s)

    monkeypatch.setattr(demo_run, "ServerWatch", Watch)
    config = DemoConfig(
        agents=1,
        turns=(1, 1),
        base_url=silent_server,
        model="m",
        live=False,
        timeouts=Timeouts(first_token=0.2, connect=1),
    )
    report = demo_run.run_demo(config)
    assert limits == {
        "server_window": 0.2,
        "oversubscription": 0.2,
        "ServerWatch.start": 0.2,
        "ServerWatch": 5.0,
    }
    (agent,) = report["agents"]
    assert agent["status"] == "error" and "StreamTimeout" in agent["error"]
