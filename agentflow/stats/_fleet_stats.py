"""The fleet aggregate: a sync callback that folds every finished turn into bounded state.

:class:`FleetStats` is subscribed to a :class:`~agentflow.Fleet` like any callback. It
runs inline where events are emitted, so it does little per event: a token event returns
after one string comparison; a turn-end event appends a handful of floats to sketch
buffers (ITL: one ``list.extend``), adds to counters, updates the agent's O(1) row and
the time series (O(1) per interval). Everything is bounded: sketches by value range,
time series by ``max_buckets``, rows by the number of agents, the by-turn table by
``max_turn_index``. Raw per-turn rows are kept only with ``keep_samples=True``.

Stats built in several workers merge (:meth:`FleetStats.merge`, or pickle them across
processes) into what one process would have built: counters and sums exactly,
quantiles exactly as one sketch would hold them (hence within α of the true values).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agentflow._errors import ConfigError
from agentflow._events import Event, TurnEndEvent
from agentflow._metrics import TurnMetrics
from agentflow._seconds import shown
from agentflow._trace import PromptInfo, TurnTrace
from agentflow.stats._agents import AgentStats
from agentflow.stats._by_turn import ByTurnIndex
from agentflow.stats._fleet_events import _error_text as _error_text
from agentflow.stats._fleet_events import fold_event, spread_request
from agentflow.stats._rows import TurnRow, ready_ns, turn_row
from agentflow.stats._settings import check_fleet_settings
from agentflow.stats._sketch import DEFAULT_RELATIVE_ACCURACY, Sketch, check_quantiles
from agentflow.stats._slo import SLO, check_slos
from agentflow.stats._timeseries import TimeSeries
from agentflow.stats._tool_figures import ToolFigures

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow.stats._journal import RunJournal
    from agentflow.typing import Clock

__all__ = ["DEFAULT_QUANTILES", "DISTRIBUTIONS", "FleetStats", "ToolFigures"]

#: Quantiles every report carries; ``FleetStats(quantiles=…)`` adds more.
DEFAULT_QUANTILES = (0.5, 0.9, 0.99, 0.999)

#: The per-turn distributions kept, by report key.
DISTRIBUTIONS = (
    "queue_wait_s", "ttft_s", "tpot_s", "itl_s", "e2e_s", "decode_tps", "context_tokens",
    "output_tokens",
)  # fmt: skip

#: Time series kept besides one ``slo:<label>`` per SLO.
SERIES = (
    "output_tokens", "prompt_tokens", "cached_tokens", "cache_prompt_tokens", "in_flight_s",
    "turns", "decode_tps_sum", "decode_turns", "errors", "retries",
)  # fmt: skip

_STATUSES = ("completed", "max_turns", "error", "cancelled")


class FleetStats:
    """Percentiles, throughput over time, goodput and token provenance of a fleet run.

    Subscribe it — ``Fleet(transport, callbacks=[stats])`` — or feed it a finished
    result with :meth:`from_result`; then :meth:`report` (or :func:`build_report`).

    Args:
        slos: SLOs to count goodput against.
        quantiles: extra quantiles (0–1) to report besides p50, p90, p99 and p99.9.
        relative_accuracy: the sketches' α: every quantile within ±α of the true value.
        bucket_s: width of the throughput-over-time buckets (doubles past ``max_buckets``).
        max_buckets: the most time buckets kept.
        per: one row per ``agent`` name (bounded by the agents defined) or per
            ``session`` (one row per conversation: per-user figures, as InferenceX
            plots them; grows with the sessions run).
        keep_samples: also keep one :class:`TurnRow` per turn (~350 bytes each).
        itl: aggregate inter-chunk latencies (the costliest part: ~0.4–0.7 µs per chunk).
        start_ns: the run's start on the trace clock: the origin of report times and of
            the time buckets. When not given, the fleet's start (its ``FleetStartEvent``;
            with :meth:`from_result`, the result's ``start_ns``), else the first turn's
            ready time, is the origin, and buckets are aligned on multiples of
            ``bucket_s``. An int (nanoseconds; the clock's, so possibly negative) or ``None``.
        max_turn_index: rows of the by-turn-index table.
        clock: the fleet's clock (``Fleet(clock=…)``), read to place error and retry
            events in the time series (they carry no time). Without it a retry is placed
            at its failed attempt's end when anything arrived, and an error at the
            latest turn end seen. A session's end is its result's ``end_ns`` (the
            fleet's clock), so rows and merges need no clock for it.
    """

    #: The event types this callback reads; it returns at once on every other one (a bus
    #: that honours this could skip building token events for it: ``docs/stats.md``).
    event_types: ClassVar[frozenset[str]] = frozenset(
        "turn_end tool_result session_end error retry compaction fleet_start fleet_end".split()
    )

    def __init__(
        self,
        *,
        slos: Iterable[SLO] = (),
        quantiles: Iterable[float] = (),
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
        bucket_s: float = 1.0,
        max_buckets: int = 2048,
        per: Literal["agent", "session"] = "agent",
        keep_samples: bool = False,
        itl: bool = True,
        start_ns: int | None = None,
        max_turn_index: int = 256,
        clock: Clock | None = None,
    ) -> None:
        if per not in ("agent", "session"):
            raise ConfigError(f"per must be 'agent' or 'session', got {per!r}")
        # (A float failed every turn's update with a TypeError, seen only as callback
        # errors; a str gave empty series.)
        if start_ns is not None and (isinstance(start_ns, bool) or not isinstance(start_ns, int)):
            # (Any int: a trace clock may be negative — a resumed virtual run's is.)
            raise ConfigError(
                "FleetStats.start_ns must be an int (nanoseconds on the trace clock) or None "
                f"(the fleet's start), got {shown(start_ns)}"
            )
        check_fleet_settings(
            relative_accuracy=relative_accuracy,
            bucket_s=bucket_s,
            max_buckets=max_buckets,
            max_turn_index=max_turn_index,
        )
        qs = check_quantiles((*DEFAULT_QUANTILES, *check_quantiles(quantiles)))  # distinct keys
        self.slos = check_slos(slos)
        self.quantiles = tuple(qs)
        self.relative_accuracy = relative_accuracy
        self.per = per
        self.keep_samples = keep_samples
        self.itl = itl
        self.start_ns = start_ns
        self.clock = clock
        #: Per-turn distributions, by report key (see :data:`DISTRIBUTIONS`).
        self.sketches = {name: Sketch(relative_accuracy) for name in DISTRIBUTIONS}
        self._slo_series = [f"slo:{s.label}" for s in self.slos]
        self.series = TimeSeries(
            [*SERIES, *self._slo_series],
            bucket_ns=max(1, round(bucket_s * 1e9)),
            anchor_ns=start_ns or 0,
            max_buckets=max_buckets,
        )
        self.by_turn = ByTurnIndex(max_turn_index, relative_accuracy)
        #: One row per agent (or session), by name (or session id).
        self.agents: dict[str, AgentStats] = {}
        #: Every turn's row, when ``keep_samples``.
        self.samples: list[TurnRow] = []
        self.turns = 0
        self.output_tokens = 0
        #: Turns and output tokens by ``output_tokens_source``.
        self.output_by_source: dict[str, list[int]] = {
            "server_usage": [0, 0],
            "chunk_count": [0, 0],
        }
        self.no_output_turns = 0
        self.exact_chunk_turns = 0
        self.prompt_tokens = self.prompt_turns = 0
        self.estimated_prompt_tokens = self.estimated_prompt_turns = 0
        self.cached_tokens = self.cache_prompt_tokens = 0
        self.cached_sources: Counter[str] = Counter()
        self.cacheable_tokens = self.cacheable_prompt_tokens = 0
        self.reconnects = 0
        self.finish_reasons: Counter[str] = Counter()
        self.slo_turns = [0] * len(self.slos)
        self.slo_tokens = [0] * len(self.slos)
        self.slo_failed_bounds: list[Counter[str]] = [Counter() for _ in self.slos]
        self.sessions: Counter[str] = Counter({s: 0 for s in _STATUSES})
        #: Sessions with no end (a stored run read while running, or after it was
        #: killed): their turns count, they are in no status (``from_result``'s
        #: ``unfinished``).
        self.unfinished = 0
        self.errors: Counter[str] = Counter({"session": 0, "tool": 0, "callback": 0})
        self.tool_calls = self.tool_errors = 0
        self.tool_s = 0.0
        #: Whether tool outcomes and durations were seen (``ToolResultEvent``s, or a
        #: :class:`RunJournal`'s): not by :meth:`from_result` without a journal, whose
        #: report then has ``null`` tool errors and durations, not zeros.
        self.tool_outcomes = True
        #: Per tool name: calls, failures and the durations of its calls.
        self.tools: dict[str, ToolFigures] = {}
        self.retries = 0
        #: Summary requests (``CompactionEvent``), also in the report's token totals; seen
        #: unless from a result without a journal noting them (a result keeps none).
        self.compactions = self.compaction_output_tokens = 0
        self.compaction_prompt_tokens = self.compaction_prompt_requests = 0
        self.compaction_cached_tokens = self.compaction_cache_prompt_tokens = 0
        self.compaction_s, self.compactions_seen = 0.0, True
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.wall_s: float | None = None
        self.fleet_start_ns: int | None = None  # the FleetStartEvent's, when seen
        self.peak_in_flight: int | None = None
        self.callback_errors = 0
        #: Whether callbacks' failures were seen as they happened (``ErrorEvent``s, or a
        #: :class:`RunJournal`'s): not by :meth:`from_result` without a journal when a
        #: callback failed — a result keeps the failures, not the events they made — nor
        #: with a journal rebuilt from a store (``RunJournal.callbacks`` false).
        self.callback_outcomes = True
        #: Workers whose stats these hold: 0 until fed (an event, :meth:`observe_turn`
        #: or :meth:`from_result`), then 1; :meth:`merge` adds — so merging into a fresh
        #: ``FleetStats``, or merging in one that saw nothing, counts no extra worker.
        self.workers = 0

    # ---- feeding -----------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        """Fold one event in (the fleet-callback entry point)."""
        if event.type == "token":
            return
        self.workers = self.workers or 1
        if isinstance(event, TurnEndEvent):
            # TurnEndEvent gains ``prompt`` (the client's PromptInfo) with the context
            # work; until it does, this is None and context comes from usage only.
            prompt = getattr(event, "prompt", None)
            self.observe_turn(
                event.agent, event.session_id, event.turn, event.metrics, event.trace, prompt
            )
        else:
            fold_event(self, event)

    def _tool(self, name: str) -> ToolFigures:
        figures = self.tools.get(name)
        if figures is None:
            figures = self.tools[name] = ToolFigures(self.relative_accuracy)
        return figures

    def observe_turn(
        self,
        agent: str,
        session_id: str,
        turn: int,
        m: TurnMetrics,
        trace: TurnTrace,
        prompt: PromptInfo | None = None,
    ) -> None:
        """Fold one finished model turn in (what a ``TurnEndEvent`` carries)."""
        self.workers = self.workers or 1
        sk = self.sketches
        self.turns += 1
        out = m.output_tokens
        self.output_tokens += out
        src = self.output_by_source[m.output_tokens_source]
        src[0] += 1
        src[1] += out
        if m.tokens_per_chunk_exact:
            self.exact_chunk_turns += 1
        self.finish_reasons[trace.finish_reason or "none"] += 1
        self.reconnects += m.reconnects
        sent, end = trace.sent_ns, trace.end_ns
        first = trace.first_output_ns
        ready = ready_ns(m, trace)
        if self.first_ns is None or ready < self.first_ns:
            self.first_ns = ready
        if self.last_ns is None or end > self.last_ns:
            self.last_ns = end

        # distributions
        sk["queue_wait_s"].add(m.queue_wait_s)
        sk["e2e_s"].add(m.e2e_s)
        sk["output_tokens"].add(out)
        if m.ttft_s is not None:
            sk["ttft_s"].add(m.ttft_s)
        else:
            self.no_output_turns += 1
        if m.tpot_s is not None:
            sk["tpot_s"].add(m.tpot_s)
            sk["decode_tps"].add(m.decode_tps)  # type: ignore[arg-type]
        if self.itl and m.itl_s:
            sk["itl_s"].extend(m.itl_s)

        # prompt, context and cache
        p = m.prompt_tokens
        context = p
        if p is not None:
            self.prompt_tokens += p
            self.prompt_turns += 1
        elif prompt is not None:
            context = prompt.estimated_tokens
            self.estimated_prompt_tokens += context
            self.estimated_prompt_turns += 1
        if context is not None:
            sk["context_tokens"].add(context)
        c = None
        if p is not None and (c := m.cached_tokens) is not None:
            self.cached_tokens += c
            self.cache_prompt_tokens += p
            self.cached_sources[m.cached_source or "unknown"] += 1
        if prompt is not None and prompt.max_cacheable_tokens is not None:
            # what any prefix cache could have served, at most the (calibrated) prompt
            self.cacheable_tokens += min(prompt.max_cacheable_tokens, prompt.estimated_tokens)
            self.cacheable_prompt_tokens += prompt.estimated_tokens

        # over time
        ts = self.series
        spread_request(ts, sent, first, end, p, c, out, m.hidden_reasoning_tokens)
        at_end = [("turns", 1.0)]
        if m.decode_tps is not None:
            at_end += (("decode_tps_sum", m.decode_tps), ("decode_turns", 1.0))

        # per agent, goodput, by turn index
        row = self._row(agent, session_id)
        row.observe(m, trace, context)
        for i, slo in enumerate(self.slos):
            if slo.met_by(m):
                self.slo_turns[i] += 1
                self.slo_tokens[i] += out
                row.slo_met[i] += 1
                at_end.append((self._slo_series[i], 1.0))
            else:
                self.slo_failed_bounds[i].update(slo.failed_bounds(m))
        ts.add_many(end, at_end)
        self.by_turn.observe(turn, m, context)
        if self.keep_samples:
            self.samples.append(turn_row(agent, session_id, turn, m, trace, prompt))

    def _row(self, agent: str | None, session_id: str | None) -> AgentStats:
        key = (session_id if self.per == "session" else agent) or agent or session_id or "?"
        row = self.agents.get(key)
        if row is None:
            row = self.agents[key] = AgentStats(agent or "?", session_id, len(self.slos))
        elif self.per == "agent" and session_id is not None:
            row.session_id = session_id
        return row

    @classmethod
    def from_result(
        cls,
        result: FleetResult,
        *,
        journal: RunJournal | None = None,
        unfinished: Iterable[str] = (),
        **options: Any,
    ) -> FleetStats:
        """Build stats from a finished :class:`~agentflow.FleetResult`.

        The figures are those subscribing would give, except what a result does not
        keep: tool and callback errors, and tool outcomes and durations (without a
        journal, tool calls are counted from the traces — the calls the model asked
        for, more than ran in a cancelled run — and the report's tool errors and
        durations are ``null``, not measured). The origin is the result's ``start_ns`` (the fleet's
        start, as a subscribed ``FleetStats`` has it) unless ``start_ns`` is given.
        Sessions that ended in an error count as ``session`` errors, placed in time at
        their end (``SessionResult.end_ns``; a result read back from a store has none:
        at their last turn's end); retries are each turn's failed attempts, placed at
        the attempt's end when anything arrived, else when the turn was finally sent.
        The retries of a turn that never finished have no time in a result (nor, from a
        store, does a session that failed before finishing a turn): they are counted
        but not placed.

        Args:
            result: the run's result.
            journal: a :class:`~agentflow.stats.RunJournal` subscribed to the run: then
                every error and retry is placed when it happened (a failed session at its
                failure, the retries of unfinished turns too), and the tool calls (the
                journal's: the calls that ran), their durations, tool and callback
                errors and the per-tool figures are those of the run. For a resumed run
                it must hold every attempt's tool calls (``agentflow resume`` adds the
                earlier attempts' from the store).
            unfinished: ids of sessions that have not ended (a run store's partial
                run: ``export_report``): their turns count, but they are not counted
                among the ended sessions (``sessions``, ``failed``, ``statuses``) —
                ``fleet.unfinished`` counts them — and their rows have no status.
            options: :class:`FleetStats`'s.
        """
        from agentflow.stats._from_result import fill_from_result

        stats = cls(**options)
        stats.workers = 1  # one run's, even if nothing in it finished
        fill_from_result(stats, result, journal, frozenset(unfinished))
        return stats

    # ---- combining ---------------------------------------------------------------

    def merge(self, other: FleetStats) -> None:
        """Fold another worker's stats into these (same settings, else a ``ConfigError``
        and nothing merged: α, SLOs, ``per``, buckets, ``max_turn_index``, ``itl``, quantiles).

        Counters and sums add exactly; the sketches merge exactly; wall time is the
        longest of the two (workers run side by side); ``peak_in_flight`` becomes
        unknown (peaks of different processes need not coincide — the merged
        ``in_flight_s`` series shows the load instead).
        """
        from agentflow.stats._merge import merge_stats

        merge_stats(self, other)

    # ---- reading -----------------------------------------------------------------

    @property
    def origin_ns(self) -> int:
        """The origin of report times: ``start_ns``, else the fleet's start, else the first
        turn's ready time."""
        for t in (self.start_ns, self.fleet_start_ns, self.first_ns):
            if t is not None:
                return t
        return 0

    @property
    def duration_s(self) -> float:
        """The run's length: the fleet's wall time when known, else origin → last end."""
        if self.wall_s is not None:
            return self.wall_s
        if self.last_ns is None:
            return 0.0
        return max(0, self.last_ns - self.origin_ns) / 1e9

    def quantile(self, name: str, q: float) -> float | None:
        """Quantile ``q`` (0–1) of distribution ``name`` (see :data:`DISTRIBUTIONS`)."""
        return self.sketches[name].quantile(q)

    def report(
        self,
        *,
        run: dict[str, Any] | None = None,
        cdf_points: int = 100,
        include_samples: bool = False,
    ) -> dict[str, Any]:
        """The versioned JSON report (``docs/report-schema.md``); see :func:`build_report`."""
        from agentflow.stats._report import build_report

        return build_report(self, run=run, cdf_points=cdf_points, include_samples=include_samples)
