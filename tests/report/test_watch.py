"""ServerWatch's sampling against a real /metrics server on loopback, in virtual time: a
bad page during the run is a failed scrape (not the end of sampling, a leaked session or
the run's own error replaced), and a slow scrape does not set off a burst of catch-up
scrapes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from agentflow._errors import TransportError
from agentflow.embedded import run_virtual
from agentflow.report import ServerWatch
from agentflow.report._prom import quick_values

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"

Handler = Callable[[int], Awaitable[bytes]]


async def _serve(page: Handler) -> tuple[web.AppRunner, str]:
    """A /metrics endpoint answering request ``n`` (from 1) with ``await page(n)``."""
    n = 0

    async def metrics(_: web.Request) -> web.Response:
        nonlocal n
        n += 1
        return web.Response(body=await page(n), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


def test_a_page_that_is_not_utf8_is_a_failed_scrape_and_the_runs_error_goes_on() -> None:
    """From the second request on the page has a byte that is not UTF-8. Samples count as
    failed scrapes; the failed after scrape is noted on the body's own error, which is the
    one raised; the HTTP session is closed."""

    async def page(n: int) -> bytes:
        return PAGE if n == 1 else PAGE + b"# HELP x caf\xe9\n"

    async def main() -> tuple[ServerWatch, pytest.ExceptionInfo[KeyError]]:
        runner, url = await _serve(page)
        watch = ServerWatch(url, interval_s=0.25)

        async def failing_run() -> None:
            async with watch:
                await asyncio.sleep(1.1)
                raise KeyError("the run's own error")

        try:
            with pytest.raises(KeyError, match="the run's own error") as raised:
                await failing_run()
        finally:
            await runner.cleanup()
        return watch, raised

    watch, raised = run_virtual(main)
    assert watch._session is None  # closed
    assert watch.before is not None and watch.after is None and watch.samples == []
    assert watch.failed_scrapes == 4  # at 0.25, 0.5, 0.75 and 1 s
    (note,) = raised.value.__notes__
    assert "ServerWatch.stop() failed: TransportError" in note and "not utf-8 text" in note


def test_a_failed_after_scrape_without_an_error_in_the_body_is_raised() -> None:
    async def page(n: int) -> bytes:
        return PAGE if n == 1 else b"\xff"

    async def main() -> ServerWatch:
        runner, url = await _serve(page)
        watch = ServerWatch(url, interval_s=0)
        try:
            with pytest.raises(TransportError, match="not utf-8 text: invalid start byte"):
                async with watch:
                    await asyncio.sleep(1.0)
        finally:
            await runner.cleanup()
        return watch

    assert run_virtual(main)._session is None


def test_a_slow_scrape_skips_the_ticks_it_missed() -> None:
    """Every 0.5 s; the third sample takes 3 s to answer. The samples after it keep the
    0.5 s grid and never come closer than 0.5 s: the missed ticks are skipped, not fired
    back to back."""
    starts: list[float] = []

    async def page(n: int) -> bytes:
        loop = asyncio.get_running_loop()
        starts.append(loop.time())
        if n == 4:  # before-scrape, then samples 1, 2, 3 (slow)
            await asyncio.sleep(3.0)
        return PAGE

    async def main() -> ServerWatch:
        runner, url = await _serve(page)
        loop = asyncio.get_running_loop()
        watch = ServerWatch(url, interval_s=0.5, clock=lambda: int(loop.time() * 1e9))
        try:
            async with watch:
                await asyncio.sleep(5.75)
        finally:
            await runner.cleanup()
        return watch

    watch = run_virtual(main)
    origin = starts[0]
    sampled = [round(t - origin, 6) for t in starts[1:-1]]
    assert sampled == [0.5, 1.0, 1.5, 4.5, 5.0, 5.5]
    assert len(watch.samples) == len(sampled) and watch.failed_scrapes == 0


def test_an_unexpected_error_while_sampling_is_a_failed_scrape(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever goes wrong with one sample (here the page scan raises once), sampling goes
    on: it is counted and logged, and the after scrape is taken."""
    calls = 0

    def scan_once_broken(*args: object, **kw: object) -> dict[str, float]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in the scan")
        return quick_values(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("agentflow.report._watch.quick_values", scan_once_broken)

    async def page(n: int) -> bytes:
        return PAGE

    async def main() -> ServerWatch:
        runner, url = await _serve(page)
        watch = ServerWatch(url, interval_s=0.25)
        try:
            async with watch:
                await asyncio.sleep(1.1)
        finally:
            await runner.cleanup()
        return watch

    watch = run_virtual(main)
    assert watch.failed_scrapes == 1 and len(watch.samples) == 3 and watch.after is not None
    assert "sampling" in caplog.text and "a bug in the scan" in caplog.text
