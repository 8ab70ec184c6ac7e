"""Scrape a server's ``/metrics`` before, during and after a run: :class:`ServerWatch`.

The two scrapes that bracket the run are parsed in full (counters, histograms); the
ones in between, every ``interval_s``, only read a handful of gauge and counter lines
with a line scan (~1 µs a line), so sampling costs the client's event loop little:
one HTTP GET and a scan of the page, once a second by default. Samples are bounded:
past ``max_samples``, every other one is dropped and the interval doubles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import aiohttp

from agentflow._counts import check_count
from agentflow._errors import TransportError
from agentflow._redact import display_url, redact
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.report._dialects import MEAN_GAUGES
from agentflow.report._prom import MetricsSnapshot, parse_metrics, quick_values
from agentflow.report._server import (
    GaugeSample,
    detect_dialect,
    sample_names,
    server_section,
)

__all__ = ["ServerWatch", "metrics_url", "scrape", "scrape_text"]

_log = logging.getLogger("agentflow.report")


class RedactedError(RuntimeError):
    """The exception logged for an unexpected sampling error: the original's traceback,
    formatted and redacted, as its message (the original's own text and frames may quote
    the URL's password; the log's handlers would print them as they are)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(redact("".join(traceback.format_exception(exc)).rstrip()))
        #: The type of the original error (``ValueError``, ...).
        self.original = type(exc).__qualname__


_HINT = (
    "vLLM serves /metrics by default; SGLang needs --enable-metrics; llama.cpp's server "
    "needs --metrics"
)


def metrics_url(url: str) -> str:
    """The ``/metrics`` URL of a server given by its base URL (``…/v1`` is dropped)."""
    u = url.rstrip("/")
    if u.endswith("/metrics"):
        return u
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return f"{u}/metrics"


async def scrape_text(session: aiohttp.ClientSession, url: str, timeout_s: float = 10.0) -> str:
    """GET ``url`` and return the body.

    Raises:
        TransportError: no answer, not a 200 (a 404 says how to turn metrics on), or a
            body that does not decode (Prometheus' text format is UTF-8).
    """
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            try:
                body = await r.text()
            except UnicodeDecodeError as exc:
                raise TransportError(
                    f"GET {url}: the page is not {exc.encoding} text: {exc.reason} at byte "
                    f"{exc.start}",
                    endpoint=url,
                ) from exc
            if r.status != 200:
                hint = f" ({_HINT})" if r.status == 404 else ""
                raise TransportError(f"GET {url}: HTTP {r.status}{hint}", endpoint=url)
            return body
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransportError(f"GET {url} failed: {exc!r}", endpoint=url) from exc


async def scrape(
    url: str, *, clock: Callable[[], int] = time.perf_counter_ns, timeout_s: float = 10.0
) -> MetricsSnapshot:
    """One parsed scrape of ``url`` (a ``/metrics`` URL or a server's base URL).

    Raises:
        TransportError: the scrape failed.
        ValueError: the page is not in Prometheus' text format.
    """
    target = metrics_url(url)
    async with aiohttp.ClientSession() as session:
        text = await scrape_text(session, target, timeout_s)
    return parse_metrics(text, t_ns=clock())


class ServerWatch:
    """Scrapes ``/metrics`` around a run and samples its gauges during it.

    Use it around the run; then :meth:`section` is the report's ``server`` section::

        async with ServerWatch(endpoint_url) as watch:
            result = await fleet.run(sessions)
        report["server"] = watch.section(report, origin_ns=stats.origin_ns)

    Args:
        url: the ``/metrics`` URL, or the server's base URL (``http://host:8000/v1``).
        interval_s: seconds between samples during the run (0: only before and after).
        timeout_s: per scrape.
        clock: nanoseconds; the client's trace clock, so the series line up with the
            client report's (``time.perf_counter_ns`` by default, as transports use).
        max_samples: samples kept during the run (then thinned, interval doubled).

    Raises:
        ConfigError: ``interval_s`` or ``timeout_s`` is not a finite number of seconds
            (≥ 0; ≥ 0.001) or ``max_samples`` an int ≥ 2 (a bool is neither).
    """

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 5.0,
        clock: Callable[[], int] = time.perf_counter_ns,
        max_samples: int = 2048,
    ) -> None:
        # (NaN was taken, and no sample was taken; a str was a bare TypeError.)
        check_seconds(interval_s, "ServerWatch.interval_s", 0, MAX_TIMEOUT_S)
        check_seconds(timeout_s, "ServerWatch.timeout_s", 1e-3, MAX_TIMEOUT_S)
        check_count(max_samples, "ServerWatch.max_samples", 2)
        self.url = metrics_url(url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.max_samples = max_samples
        #: The full scrapes that bracket the run.
        self.before: MetricsSnapshot | None = None
        self.after: MetricsSnapshot | None = None
        #: Gauge (and counter) samples taken during the run.
        self.samples: list[GaugeSample] = []
        #: Scrapes during the run that failed (they are skipped).
        self.failed_scrapes = 0
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._names: dict[str, tuple[str, ...]] = {}
        self._unexpected = False

    async def start(self, *, timeout_s: float | None = None) -> None:
        """Take the *before* scrape and start sampling.

        Args:
            timeout_s: the *before* scrape's limit, when it should differ from the
                watch's ``timeout_s`` (a server that may not answer at all, asked before
                a run that would then not start).

        Raises:
            TransportError: the server's ``/metrics`` did not answer, or its page is not in
                Prometheus' text format (a login page, another service's answer).
        """
        self._session = aiohttp.ClientSession()
        try:
            self.before = await self._full(self.timeout_s if timeout_s is None else timeout_s)
        except BaseException:
            await self._session.close()
            self._session = None
            raise
        dialect = detect_dialect(self.before)
        self._names = sample_names(self.before, dialect) if dialect else {}
        if self.interval_s > 0 and self._names:
            self._task = asyncio.get_running_loop().create_task(self._sample_loop())

    async def stop(self) -> None:
        """Stop sampling and take the *after* scrape; the HTTP session is closed whatever
        happens.

        Raises:
            TransportError: the *after* scrape failed, or its page is not in Prometheus'
                text format.
        """
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self._session is not None:
                self.after = await self._full(self.timeout_s)
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None

    async def __aenter__(self) -> ServerWatch:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop; when the body raised, a failure to stop is noted on the body's exception,
        which goes on (it is the one that says what went wrong with the run)."""
        if e is None:
            await self.stop()
            return
        try:
            await self.stop()
        except Exception as exc:
            e.add_note(f"and ServerWatch.stop() failed: {type(exc).__name__}: {exc}")

    def section(
        self, client: Mapping[str, Any] | None = None, *, origin_ns: int | None = None
    ) -> dict[str, Any]:
        """The report's ``server`` section (see :func:`~agentflow.report.server_section`).

        Raises:
            RuntimeError: the watch has not been started and stopped.
        """
        if self.before is None or self.after is None:
            raise RuntimeError("ServerWatch.section() needs a finished watch (start, then stop)")
        section = server_section(
            self.before,
            self.after,
            samples=self.samples,
            client=client,
            url=display_url(self.url),
            origin_ns=origin_ns,
        )
        section["source"]["failed_scrapes"] = self.failed_scrapes
        return section

    async def _full(self, timeout_s: float) -> MetricsSnapshot:
        assert self._session is not None
        text = await scrape_text(self._session, self.url, timeout_s)
        t_ns = self.clock()
        try:
            return parse_metrics(text, t_ns=t_ns)
        except ValueError as exc:  # the server's answer, not the caller's configuration
            url = display_url(self.url)
            raise TransportError(
                f"GET {url}: the page is not Prometheus' text format: {redact(str(exc))}",
                endpoint=url,
            ) from exc

    async def _sample_loop(self) -> None:
        session = self._session
        assert session is not None
        names = self._names
        flat = [n for ns in names.values() for n in ns]
        means = [n for k, ns in names.items() if k in MEAN_GAUGES for n in ns]
        interval = self.interval_s
        loop = asyncio.get_running_loop()
        next_t = loop.time() + interval
        while True:
            now = loop.time()
            if next_t < now:  # a slow scrape: skip the ticks it missed (no burst after it)
                next_t += math.ceil((now - next_t) / interval) * interval
            await asyncio.sleep(next_t - now)
            next_t += interval
            try:
                text = await scrape_text(session, self.url, self.timeout_s)
                t = self.clock()
                raw = quick_values(text, flat, means)
            except TransportError:
                self.failed_scrapes += 1
                continue
            except Exception as exc:
                # Sampling must not end on an error nobody expected: the task would die
                # quietly, the samples stop, and stop() would raise it instead of the
                # after scrape. It is a failed scrape; the first one is logged — through
                # the standard library's logger, which redacts nothing: the URL without
                # its userinfo, and as its exception (for handlers that want one: Sentry,
                # JSON formatters) a stand-in that carries the redacted traceback.
                self.failed_scrapes += 1
                if not self._unexpected:
                    self._unexpected = True
                    _log.error(
                        "ServerWatch: sampling %s failed unexpectedly",
                        display_url(self.url),
                        exc_info=RedactedError(exc),
                    )
                continue
            values: dict[str, float] = {}
            for key, ns in names.items():
                if all(n in raw for n in ns):
                    values[key] = sum(raw[n] for n in ns)
            self.samples.append(GaugeSample(t, values))
            if len(self.samples) > self.max_samples:
                del self.samples[1::2]
                interval *= 2
                next_t = loop.time() + interval
