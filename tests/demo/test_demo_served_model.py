"""``agentflow demo --base-url URL`` without ``--model``: the server's own model.

The demo used to ask for a model named ``"default"``; vLLM answers every such request
with a 404 "The model `default` does not exist" (the simulator accepts any name, so it
went unnoticed). It now asks for the model ``GET /v1/models`` lists, as ``agentflow
bench`` does, and says to pass ``--model`` when it cannot find out.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from rich.console import Console

from agentflow._errors import ConfigError
from agentflow.demo import run as demo_run
from agentflow.demo.run import DemoConfig, resume_config
from agentflow.llamacpp import free_port
from agentflow.testing import Reply

from ..wait import GUARD_S

SERVED = "org/served-model"


class VLLMLike:
    """A loopback server that, as vLLM does, lists one model and refuses any other name."""

    def __init__(self, *, list_models: bool = True, second: bool = False) -> None:
        self.list_models = list_models
        self.second = second  # another model, of another window
        self.asked: list[str] = []
        self.model_gets = 0
        self.base_url = ""

    async def _models(self, request: web.Request) -> web.Response:
        self.model_gets += 1
        if not self.list_models:
            raise web.HTTPNotFound
        entries = [{"id": SERVED, "object": "model", "root": SERVED, "max_model_len": 1_000_000}]
        if self.second:
            entries.append({"id": "other", "object": "model", "max_model_len": 8192})
        return web.json_response({"object": "list", "data": entries})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        model = (await request.json()).get("model")
        self.asked.append(model)
        if model != SERVED and self.list_models:
            error = {
                "message": f"The model `{model}` does not exist.",
                "type": "NotFoundError",
                "param": "model",
                "code": 404,
            }
            return web.json_response({"error": error}, status=404)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in Reply.text("All done.").frames:
            await resp.write(frame)
        await resp.write_eof()
        return resp

    @contextlib.contextmanager
    def running(self) -> Iterator[VLLMLike]:
        """Serve on a loop of its own in a thread while the demo (with its own loop) runs."""
        started = threading.Event()
        loop = asyncio.new_event_loop()
        stopped = asyncio.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_get("/v1/models", self._models)
            app.router.add_post("/v1/chat/completions", self._chat)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
            started.set()
            try:
                await stopped.wait()
            finally:
                await runner.cleanup()

        thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
        thread.start()
        try:
            assert started.wait(GUARD_S), "the test server did not start"
            yield self
        finally:
            loop.call_soon_threadsafe(stopped.set)
            thread.join(GUARD_S)
            loop.close()


def _demo(base_url: str) -> dict[str, Any]:
    config = DemoConfig(base_url=base_url, agents=2, turns=(1, 1), live=False)
    return demo_run.run_demo(config, console=Console(file=io.StringIO()))


def test_the_demo_asks_for_the_model_the_server_lists() -> None:
    with VLLMLike().running() as server:
        report = _demo(server.base_url)
    assert server.asked and set(server.asked) == {SERVED}
    assert server.model_gets == 1  # the model and its window, from one GET
    statuses = [a["status"] for a in report["agents"]]
    assert statuses == ["completed", "completed"], json.dumps(report["agents"])


def test_a_server_that_names_no_model_gets_default_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with VLLMLike(list_models=False).running() as server:
        _demo(server.base_url)
    assert set(server.asked) == {"default"}
    err = capsys.readouterr().err
    assert "names no model" in err and "--model" in err


def test_several_models_are_a_config_error_with_the_commands_advice() -> None:
    with (
        VLLMLike(second=True).running() as server,
        pytest.raises(ConfigError, match=r"several models.*pass --model NAME") as error,
    ):
        _demo(server.base_url)
    assert "model=" not in str(error.value)  # (the Python API's advice, not the command's)


def test_a_run_recorded_without_a_model_resumes_asking_for_default(tmp_path: Path) -> None:
    """A run an earlier release recorded without ``--model`` (``model: null``: it asked
    for ``"default"``) resumes as it ran: the server is not asked for its model again,
    which gave the agents another model and refused the resume."""
    store = tmp_path / "runs.db"
    with VLLMLike(list_models=False).running() as server:
        config = DemoConfig(base_url=server.base_url, agents=2, turns=(1, 1), live=False,
                            store=store)  # fmt: skip
        report = demo_run.run_demo(config, console=Console(file=io.StringIO()))
        run_id = report["run"]["run_id"]
        with sqlite3.connect(store) as db:  # as the earlier release recorded it
            row = db.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            recorded = json.loads(row[0])
            assert recorded["demo"]["model"] == "default"
            recorded["demo"]["model"] = None
            db.execute(
                "UPDATE runs SET config = ? WHERE run_id = ?", (json.dumps(recorded), run_id)
            )
        server.list_models, server.model_gets = True, 0  # asking it would change the agents
        resumed = resume_config(recorded, run_id, store=store, live=False)
        # (refused before: "agent 'coder-000' is not configured as it was")
        again = demo_run.run_demo(resumed, console=Console(file=io.StringIO()))
    assert again["run"]["run_id"] == run_id and again["run"]["model"] is None
    # One GET: the budget's window. Asking which model it serves (a second) gave a run
    # with sessions left another model than it was recorded with.
    assert server.model_gets == 1


def test_a_server_that_cannot_be_asked_is_a_config_error_naming_model() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(ConfigError, match=r"could not ask .* which model .*--model NAME"):
        _demo(url)
