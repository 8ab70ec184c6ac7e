"""Prometheus exposition of a running fleet: a callback, a private registry, an opt-in endpoint.

:class:`PrometheusExporter` is a fleet callback that keeps counters and fixed-bucket
histograms and hands them to ``prometheus-client`` through a custom collector in its
*own* :class:`~prometheus_client.CollectorRegistry` (never the process-global one, so two
fleets or two tests never collide). Observing is a ``bisect`` and an increment per value
— ``prometheus_client.Histogram.observe`` takes a lock per call, which per ITL chunk
would be felt on the hot path. :meth:`PrometheusExporter.serve` starts an aiohttp
endpoint on the running loop, bound to ``127.0.0.1`` unless told otherwise.

Names follow Prometheus conventions: prefix ``agentflow_``, base units (``_seconds``),
``_total`` on counters; no per-agent labels (10,000 agents would be 10,000 series per
metric — use the JSON report for per-agent figures).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

if TYPE_CHECKING:
    from aiohttp import web  # imported when a server starts, not with agentflow

from agentflow._context_events import CompactionEvent
from agentflow._errors import ConfigError
from agentflow._events import (
    ErrorEvent,
    Event,
    SessionEndEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from agentflow._metrics import turn_metrics

__all__ = ["DEFAULT_BUCKETS", "MetricsServer", "PrometheusExporter"]

#: A Prometheus metric name (the prefix must be one: every name is ``<prefix>_<metric>``).
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

_FAST = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075)

#: Histogram bucket upper bounds, by histogram (``+Inf`` is implied).
DEFAULT_BUCKETS: dict[str, tuple[float, ...]] = {
    "queue_wait_seconds": (
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
    ),
    "time_to_first_token_seconds": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10,
        20, 40, 80, 160,
    ),
    "time_per_output_token_seconds": (*_FAST, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0),
    "inter_chunk_latency_seconds": (*_FAST, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0),
    "e2e_request_latency_seconds": (
        0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920,
    ),
    "decode_tokens_per_second": (
        1, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 5000,
    ),
    "request_prompt_tokens": tuple(float(2**k) for k in range(6, 21)),
    "tool_duration_seconds": (
        0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
    ),
}  # fmt: skip

_HELP = {
    "queue_wait_seconds": "Turn ready to request sent (admission wait).",
    "time_to_first_token_seconds": "Request sent to first output-bearing chunk.",
    "time_per_output_token_seconds": (
        "(E2E - TTFT) / (output tokens - hidden reasoning tokens - 1), per turn."
    ),
    "inter_chunk_latency_seconds": "Gap between output-bearing chunks (per chunk, not token).",
    "e2e_request_latency_seconds": "Request sent to end of stream.",
    "decode_tokens_per_second": "Per-turn decode speed, 1 / TPOT.",
    "request_prompt_tokens": "Prompt tokens per turn, as the server reported them.",
    "tool_duration_seconds": "Tool call durations.",
}


class _Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float], name: str = "") -> None:
        for b in bounds:
            if isinstance(b, bool) or not isinstance(b, int | float) or math.isnan(b):
                raise ConfigError(f"buckets[{name!r}]: {b!r} is not a number")
            if b == -math.inf:
                raise ConfigError(f"buckets[{name!r}]: -inf is not a bucket bound")
        # +Inf is every histogram's last bucket already; a bound given twice is one bucket.
        self.bounds = tuple(sorted({float(b) for b in bounds if b != math.inf}))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.total += v

    def observe_many(self, values: Sequence[float]) -> None:
        counts, bounds = self.counts, self.bounds
        for v in values:
            counts[bisect_left(bounds, v)] += 1
        self.total += math.fsum(values)

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        cumulative, run = [], 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            run += n
            cumulative.append(("+Inf" if bound == math.inf else repr(bound), float(run)))
        return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=self.total)


class PrometheusExporter:
    """A fleet callback that exposes the fleet's figures in Prometheus format.

    Args:
        buckets: bucket bounds replacing :data:`DEFAULT_BUCKETS` entries, by histogram
            name without the prefix (e.g. ``"time_to_first_token_seconds"``).
        in_flight: a callable returning the model requests in flight now (e.g. the
            fleet's admission gate's ``in_flight``); exposed as
            ``agentflow_requests_in_flight`` when given. Called at scrapes only, so it
            may read a fleet made after the exporter.
        prefix: the metric-name prefix: a Prometheus metric name
            (``[a-zA-Z_:][a-zA-Z0-9_:]*``), else :class:`~agentflow.ConfigError`.

    Attributes:
        registry: the exporter's own registry; pass it to ``generate_latest`` or
            ``push_to_gateway`` as well.
    """

    #: The event types this callback reads (see :attr:`FleetStats.event_types`).
    event_types: ClassVar[frozenset[str]] = frozenset(
        {"turn_end", "tool_result", "session_end", "error", "retry", "compaction"}
    )

    def __init__(
        self,
        *,
        buckets: dict[str, Sequence[float]] | None = None,
        in_flight: Callable[[], float] | None = None,
        prefix: str = "agentflow",
    ) -> None:
        bounds = {**DEFAULT_BUCKETS, **(buckets or {})}
        unknown = set(bounds) - set(DEFAULT_BUCKETS)
        if unknown:
            raise ConfigError(f"buckets: no histogram named {sorted(unknown)[0]!r}")
        if not isinstance(prefix, str) or _NAME.fullmatch(prefix) is None:
            # prometheus_client would rewrite it silently ("my-app" → "my_app_…")
            raise ConfigError(
                f"PrometheusExporter(prefix={prefix!r}): not a Prometheus metric name "
                "(letters, digits, '_' and ':', not starting with a digit)"
            )
        self.prefix = prefix
        self._h = {name: _Histogram(b, name) for name, b in bounds.items()}
        self._in_flight = in_flight
        self.turns = 0
        self.output_tokens = {"server_usage": 0, "chunk_count": 0}
        self.prompt_tokens = 0
        self.cached_tokens = 0
        #: Prompt tokens of the turns that reported cached tokens: the hit rate's
        #: denominator (a server that never reports them leaves it at 0, a mixed fleet
        #: counts only the replicas that do).
        self.cache_reported_prompt_tokens = 0
        self.reconnects = 0
        self.retries = 0
        self.tool_calls = {"ok": 0, "error": 0}
        self.sessions_ended = {s: 0 for s in ("completed", "max_turns", "error", "cancelled")}
        self.errors = {"session": 0, "tool": 0, "callback": 0}
        #: Context policies' summary requests (``CompactionEvent``): no turn, but the
        #: server's work; their tokens are counted apart from the turns'.
        self.compactions = 0
        self.compaction_tokens = {"prompt": 0, "cached": 0, "output": 0}
        self._active: set[str] = set()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def __call__(self, event: Event) -> None:
        """Fold one event in (the fleet-callback entry point)."""
        if event.type == "token":
            return
        if isinstance(event, TurnEndEvent):
            m, h = event.metrics, self._h
            self.turns += 1
            self.output_tokens[m.output_tokens_source] += m.output_tokens
            self.reconnects += m.reconnects
            h["queue_wait_seconds"].observe(m.queue_wait_s)
            h["e2e_request_latency_seconds"].observe(m.e2e_s)
            if m.ttft_s is not None:
                h["time_to_first_token_seconds"].observe(m.ttft_s)
            if m.tpot_s is not None:
                h["time_per_output_token_seconds"].observe(m.tpot_s)
                h["decode_tokens_per_second"].observe(1.0 / m.tpot_s)
            if m.itl_s:
                h["inter_chunk_latency_seconds"].observe_many(m.itl_s)
            if m.prompt_tokens is not None:
                self.prompt_tokens += m.prompt_tokens
                h["request_prompt_tokens"].observe(m.prompt_tokens)
                # a hit rate needs both figures, as FleetStats' cache_hit_rate
                if m.cached_tokens is not None:
                    self.cached_tokens += m.cached_tokens
                    self.cache_reported_prompt_tokens += m.prompt_tokens
            self._active.add(event.session_id)  # a session ends after its last turn
        elif isinstance(event, ToolResultEvent):
            self.tool_calls["error" if event.is_error else "ok"] += 1
            self._h["tool_duration_seconds"].observe(event.duration_s)
        elif isinstance(event, SessionEndEvent):
            status = event.result.status
            self.sessions_ended[status] = self.sessions_ended.get(status, 0) + 1
            self._active.discard(event.session_id)
        elif isinstance(event, ErrorEvent):
            self.errors[event.where] = self.errors.get(event.where, 0) + 1
        elif event.type == "retry":
            self.retries += 1
        elif isinstance(event, CompactionEvent):
            self._compaction(event)

    def _compaction(self, event: CompactionEvent) -> None:
        m, tokens = turn_metrics(event.trace), self.compaction_tokens
        self.compactions += 1
        tokens["output"] += m.output_tokens
        if m.prompt_tokens is not None:
            tokens["prompt"] += m.prompt_tokens
            if m.cached_tokens is not None:
                tokens["cached"] += m.cached_tokens

    @property
    def sessions_active(self) -> int:
        """Sessions with at least one finished turn that have not ended yet."""
        return len(self._active)

    def collect(self) -> Iterator[Metric]:
        """The metric families (called by the registry at each scrape)."""
        return self._families(sample=True)

    def _families(self, *, sample: bool) -> Iterator[Metric]:
        p = self.prefix
        yield _counter(f"{p}_turns", "Model turns that finished streaming.", self.turns)
        yield _labelled(
            f"{p}_output_tokens",
            "Output tokens, by where the count came from (server usage or chunk counting).",
            "source",
            self.output_tokens,
        )
        yield _counter(
            f"{p}_prompt_tokens", "Prompt tokens the server reported.", self.prompt_tokens
        )
        yield _counter(
            f"{p}_cached_prompt_tokens",
            "Prompt tokens the server reported as served from its prefix cache.",
            self.cached_tokens,
        )
        yield _counter(
            f"{p}_cache_reported_prompt_tokens",
            "Prompt tokens of the turns that reported cached tokens (the hit rate's "
            "denominator: cached_prompt_tokens / this).",
            self.cache_reported_prompt_tokens,
        )
        yield _counter(
            f"{p}_reconnects", "Requests resent before any response byte.", self.reconnects
        )
        yield _counter(
            f"{p}_retries", "Turn attempts that failed and were sent again.", self.retries
        )
        yield _labelled(f"{p}_tool_calls", "Tool calls, by outcome.", "outcome", self.tool_calls)
        yield _labelled(
            f"{p}_sessions_ended", "Sessions that ended, by status.", "status", self.sessions_ended
        )
        yield _labelled(f"{p}_errors", "Errors, by where they happened.", "where", self.errors)
        yield _counter(
            f"{p}_compactions",
            "Context policies' summary requests (not turns: apart from every turn figure).",
            self.compactions,
        )
        yield _labelled(
            f"{p}_compaction_tokens",
            "Tokens of the summary requests, by kind: prompt and cached as the server "
            "reported them, output as counted for a turn.",
            "kind",
            self.compaction_tokens,
        )
        yield GaugeMetricFamily(
            f"{p}_sessions_active",
            "Sessions with a finished turn that have not ended.",
            value=len(self._active),
        )
        if self._in_flight is not None:
            # sampled at scrapes only: describe() runs in the constructor, when the
            # callable may not work yet (the fleet it reads takes this exporter)
            yield GaugeMetricFamily(
                f"{p}_requests_in_flight",
                "Model requests in flight now.",
                value=float(self._in_flight()) if sample else None,
            )
        for name, hist in self._h.items():
            yield hist.family(f"{p}_{name}", _HELP[name])

    def describe(self) -> list[Metric]:
        """The metric families, for the registry's name-clash check (``in_flight`` is
        not called: the registry describes the exporter while it is being made)."""
        return list(self._families(sample=False))

    def text(self) -> str:
        """The current exposition in Prometheus text format 0.0.4."""
        encoder, _ = choose_encoder("")
        return encoder(self.registry).decode("utf-8")

    def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        """An HTTP endpoint serving ``/metrics`` from this exporter; use it as
        ``async with exporter.serve(port=9400) as server: …`` (``port=0``: any free port,
        see ``server.port``). Bound to loopback unless ``host`` says otherwise."""
        return MetricsServer(self.registry, host=host, port=port)


class MetricsServer:
    """``GET /metrics`` for a registry, served by aiohttp on the running event loop.

    Scrapes are served on the loop (no thread, no GIL contention); rendering a scrape
    costs on the order of 100 µs of loop time.
    """

    def __init__(self, registry: CollectorRegistry, *, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The metrics URL (an IPv6 host in brackets, as URLs need it)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        """Bind and start serving."""
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])  # the port picked, when port=0

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _labelled(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family
