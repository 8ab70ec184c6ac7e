"""`agentflow.llamacpp.server_slots` and `oversubscription`: a fleet with more requests in
flight than llama.cpp's slots is warned, once, before it runs.

Against a loopback server that answers `/props` as llama.cpp does (and one that has no
`/props`), and — marked ``llamacpp`` — against the real server, whose slots are its
``n_parallel``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agentflow import ConfigError
from agentflow.llamacpp import LlamaCppServer, oversubscription, server_slots


async def _serve(props: Any | None) -> tuple[web.AppRunner, str]:
    async def answer(_: web.Request) -> web.Response:
        return web.json_response(props)

    app = web.Application()
    if props is not None:
        app.router.add_get("/props", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1"


@pytest.fixture
async def four_slots() -> AsyncIterator[str]:
    runner, url = await _serve({"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}})
    yield url
    await runner.cleanup()


async def test_slots_read_from_props(four_slots: str) -> None:
    """`total_slots` is read from the server's root, whatever the base URL's /v1."""
    assert await server_slots(four_slots) == 4
    assert await server_slots(four_slots.removesuffix("/v1")) == 4


async def test_oversubscription_warns_once_with_the_numbers(
    four_slots: str, caplog: pytest.LogCaptureFixture
) -> None:
    """64 in flight on 4 slots: one warning naming both numbers and the two remedies; 4
    in flight: none."""
    caplog.set_level(logging.WARNING, logger="agentflow")
    warning = await oversubscription(four_slots, 64)
    assert warning is not None
    assert "decodes 4 requests at once" in warning and "up to 64" in warning
    assert "60 wait in the server's queue" in warning
    assert "max_concurrency to 4" in warning and "--n-parallel" in warning
    logged = [r.getMessage() for r in caplog.records if r.name == "agentflow.llamacpp"]
    assert len(logged) == 1 and "concurrency=64" in logged[0] and "slots=4" in logged[0]
    assert await oversubscription(four_slots, 4) is None


async def test_no_props_no_warning() -> None:
    """A server without /props (not llama.cpp), or one that cannot be reached: no slots,
    no warning."""
    runner, url = await _serve(None)
    try:
        assert await server_slots(url) is None
        assert await oversubscription(url, 1000) is None
    finally:
        await runner.cleanup()
    assert await oversubscription(url, 1000, timeout_s=2.0) is None  # closed now


async def test_implausible_slots_are_ignored() -> None:
    """A `total_slots` that is not a positive int is not believed."""
    for bad in (0, -1, "4", True, None):
        runner, url = await _serve({"total_slots": bad})
        try:
            assert await server_slots(url) is None, bad
        finally:
            await runner.cleanup()


async def test_bad_timeout_is_a_config_error() -> None:
    """timeout_s must be a finite number > 0 (inf waited for ever); the error names it."""
    for bad in (0, float("inf"), float("nan"), "5"):
        with pytest.raises(ConfigError, match="server_slots: timeout_s"):
            await server_slots("http://127.0.0.1:1/v1", timeout_s=bad)  # type: ignore[arg-type]


@pytest.mark.llamacpp
async def test_real_server_reports_its_n_parallel(llamacpp: LlamaCppServer) -> None:
    """The real llama.cpp's /props says total_slots = n_parallel (4 in the fixture)."""
    assert await server_slots(llamacpp.base_url) == llamacpp.n_parallel == 4
    warning = await oversubscription(llamacpp.base_url, 64)
    assert warning is not None and "decodes 4 requests at once" in warning


def test_a_servers_slots_and_context_are_checked_and_sized_per_slot() -> None:
    """By default every slot can hold a session as long as SmolLM2's window at once
    (4 × 8192: two demo prompts of ~4,600 tokens overflowed a shared 8192); a nonsense
    size is a ConfigError before anything starts (llama.cpp crashed with a backtrace)."""
    from agentflow import ConfigError
    from agentflow.llamacpp import SLOT_CONTEXT

    assert LlamaCppServer().n_ctx == 4 * SLOT_CONTEXT == 32768
    assert LlamaCppServer(n_parallel=2).n_ctx == 2 * SLOT_CONTEXT
    assert LlamaCppServer(n_ctx=8192).n_ctx == 8192
    for bad in ({"n_ctx": 1}, {"n_ctx": -5}, {"n_ctx": 10**11}, {"n_parallel": 0},
                {"n_parallel": 100_000}, {"n_parallel": True}):  # fmt: skip
        with pytest.raises(ConfigError, match=r"LlamaCppServer\.n_"):
            LlamaCppServer(**bad)


def test_default_context_is_capped_for_many_slots() -> None:
    """Past 128 slots, n_parallel × 8192 exceeds MAX_CONTEXT: the default is MAX_CONTEXT
    (LlamaCppServer(n_parallel=129) raised a ConfigError naming n_ctx, which the user never
    passed), and every slot still gets at least half of SmolLM2's window at once."""
    from agentflow._llamacpp_server import MAX_CONTEXT, SLOT_CONTEXT

    assert LlamaCppServer(n_parallel=128).n_ctx == 128 * SLOT_CONTEXT == MAX_CONTEXT
    for n in (129, 200, 256):
        server = LlamaCppServer(n_parallel=n)
        assert server.n_ctx == MAX_CONTEXT, n
        assert server.n_ctx // n >= SLOT_CONTEXT // 2, n


def test_threads_are_checked_before_anything_starts() -> None:
    """threads=0 made llama.cpp abort (GGML_ASSERT) with a 31-line backtrace as the
    ServerStartError, never naming threads; -3 and "2" were accepted. Now anything but an
    int ≥ 1 is a ConfigError naming the field and the value; so is the child's flag."""
    import subprocess
    import sys

    from agentflow._process import free_port
    from tests.wait import GUARD_S

    assert LlamaCppServer(threads=1).threads == 1
    for bad in (0, -3, "2", True, 1.5, None):
        with pytest.raises(ConfigError) as caught:
            LlamaCppServer(threads=bad)  # type: ignore[arg-type]
        assert str(caught.value) == f"LlamaCppServer.threads must be an int ≥ 1, got {bad!r}"
    cmd = [sys.executable, "-m", "agentflow._llamacpp_server", "--port", str(free_port())]
    child = subprocess.run(
        [*cmd, "--threads", "0"], capture_output=True, text=True, timeout=GUARD_S * 5
    )
    assert child.returncode == 2, child.stderr[-2000:]
    assert "argument --threads: must be an int ≥ 1, got '0'" in child.stderr


async def test_a_bad_url_or_concurrency_is_a_config_error_naming_it() -> None:
    """A malformed base URL raised a bare ValueError ("Invalid IPv6 URL") naming no
    argument, and a concurrency of 0 or -5 quietly got no warning; both are ConfigErrors
    naming the argument and the value (a URL's credentials left out)."""
    for url in ("http://[::1/v1", "ftp://host/v1", "not a url", "http:///v1",
                "http://u:secret@127.0.0.1:99999/v1", 5):  # fmt: skip
        shown = "'http://127.0.0.1:99999/v1'" if "secret" in str(url) else repr(url)
        for ask in (server_slots(url), oversubscription(url, 8)):  # type: ignore[arg-type]
            with pytest.raises(ConfigError) as caught:
                await ask
            assert "base_url must be an http(s) URL" in str(caught.value)
            assert str(caught.value).endswith(f"got {shown}")
            assert "secret" not in str(caught.value)
    for bad in (0, -5, True, "8", 2.5):
        with pytest.raises(ConfigError) as caught:
            await oversubscription("http://127.0.0.1:1/v1", bad)  # type: ignore[arg-type]
        assert str(caught.value) == f"oversubscription: concurrency must be an int ≥ 1, got {bad!r}"
