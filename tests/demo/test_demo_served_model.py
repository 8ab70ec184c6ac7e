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
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from rich.console import Console

from agentflow._errors import ConfigError
from agentflow.demo import run as demo_run
from agentflow.demo.run import DemoConfig
from agentflow.llamacpp import free_port
from agentflow.testing import Reply

from ..wait import GUARD_S

SERVED = "org/served-model"


class VLLMLike:
    """A loopback server that, as vLLM does, lists one model and refuses any other name."""

    def __init__(self, *, list_models: bool = True) -> None:
        self.list_models = list_models
        self.asked: list[str] = []
        self.base_url = ""

    async def _models(self, request: web.Request) -> web.Response:
        if not self.list_models:
            raise web.HTTPNotFound
        entry = {"id": SERVED, "object": "model", "root": SERVED, "max_model_len": 1_000_000}
        return web.json_response({"object": "list", "data": [entry]})

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


def test_a_server_that_cannot_be_asked_is_a_config_error_naming_model() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(ConfigError, match=r"could not ask .* which model .*--model NAME"):
        _demo(url)
