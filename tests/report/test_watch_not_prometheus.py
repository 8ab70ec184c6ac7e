"""A /metrics page that is not Prometheus' text format (a login page, another service)
is the server's failure, as a page that does not answer is: ServerWatch's start and
stop raise a TransportError naming the URL, not the parser's bare ValueError."""

from __future__ import annotations

import asyncio

import pytest

from agentflow._errors import TransportError
from agentflow.report import ServerWatch
from tests.report.test_watch import PAGE, _serve
from tests.wait import GUARD_S

LOGIN = b"<html><body>login</body></html>\n"


def test_start_on_a_page_that_is_not_prometheus_text() -> None:
    async def page(_: int) -> bytes:
        return LOGIN

    async def main() -> None:
        runner, url = await _serve(page)
        watch = ServerWatch(url, interval_s=0)
        try:
            with pytest.raises(TransportError, match="/metrics: the page is not Prometheus"):
                async with watch:
                    pass
            assert watch._session is None  # closed although start failed
        finally:
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(main(), GUARD_S))


def test_stop_on_a_page_that_is_not_prometheus_text() -> None:
    async def page(n: int) -> bytes:
        return PAGE if n == 1 else LOGIN

    async def main() -> None:
        runner, url = await _serve(page)
        watch = ServerWatch(url, interval_s=0)
        try:
            await watch.start()
            with pytest.raises(TransportError, match=r"127\.0\.0\.1:\d+/metrics") as raised:
                await watch.stop()
            assert watch._session is None and watch.after is None
            assert isinstance(raised.value.__cause__, ValueError)
        finally:
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(main(), GUARD_S))
