"""ServerWatch's log line for an unexpected sampling error keeps the URL's userinfo out.

The line goes through the standard library's logger, which redacts nothing: it logged
``http://user:password@host/metrics`` as given, and the traceback as raised.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from agentflow.embedded import run_virtual
from agentflow.report import ServerWatch

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
PASSWORD = "WatchPw-UNIT-99"


def test_an_unexpected_sampling_error_is_logged_without_the_urls_password(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The scan raises an error that quotes the URL, as an unexpected error may. Handlers
    that read the record's exception (Sentry, JSON formatters) get one — the redacted
    traceback — not only a message."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/plain", charset="utf-8")

    async def main() -> ServerWatch:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        watch = ServerWatch(
            f"http://user:{PASSWORD}@127.0.0.1:{runner.addresses[0][1]}/v1", interval_s=0.25
        )

        def scan_broken(*args: object, **kw: object) -> dict[str, float]:
            raise RuntimeError(f"a bug in the scan of {watch.url}")

        try:
            async with watch:  # the before scrape is taken; then every sample fails
                monkeypatch.setattr("agentflow.report._watch.quick_values", scan_broken)
                await asyncio.sleep(0.6)
        finally:
            await runner.cleanup()
        return watch

    watch = run_virtual(main)
    assert watch.failed_scrapes >= 1
    shown = watch.url.replace(f"user:{PASSWORD}@", "")
    assert f"sampling {shown} failed unexpectedly" in caplog.text
    assert f"a bug in the scan of {shown}" in caplog.text
    assert PASSWORD not in caplog.text
    records = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert records and all(r.exc_info is not None for r in records)
    exc = records[0].exc_info[1]  # type: ignore[index]
    assert isinstance(exc, Exception)
    assert "RuntimeError: a bug in the scan of" in str(exc)
    assert "scan_broken" in str(exc)  # the traceback, as text
    assert PASSWORD not in str(exc)
