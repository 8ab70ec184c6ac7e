"""One scrape of a server's ``/metrics``, parsed; counter deltas and histogram quantiles.

Parsing goes through ``prometheus_client.parser`` and keeps every *sample* by its own
name (``vllm:prompt_tokens_total``, ``vllm:ttft_seconds_bucket``…): the parser's family
names depend on how a server spells its ``# TYPE`` lines (vLLM declares ``vllm:x`` and
samples ``vllm:x_total``; llama.cpp declares ``llamacpp:x_total``), sample names do not.
Series that differ only in labels (one per model, per engine, per finish reason) are
summed: a cross-check compares the server's totals with the client's.

A histogram's quantile is estimated as Prometheus' ``histogram_quantile`` does: find the
bucket holding the rank, interpolate linearly inside it. Its error is up to the width of
that bucket, which is why reports keep the buckets beside the estimates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from agentflow._errors import ConfigError

__all__ = ["HistogramData", "MetricsSnapshot", "parse_metrics", "quick_values"]


@dataclass(frozen=True, slots=True)
class HistogramData:
    """A cumulative histogram (or the difference of two scrapes of one).

    Attributes:
        bounds: the buckets' upper bounds, ascending, ``inf`` last.
        cumulative: observations ≤ each bound.
        count: observations.
        sum: their sum.
    """

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    sum: float

    @property
    def mean(self) -> float | None:
        """``sum / count``; ``None`` with no observation."""
        return self.sum / self.count if self.count > 0 else None

    def delta(self, earlier: HistogramData | None) -> HistogramData:
        """What was observed since ``earlier`` (a scrape of the same histogram)."""
        if earlier is None:
            return self
        if earlier.bounds != self.bounds:
            raise ValueError("the histogram's buckets changed between scrapes")
        return HistogramData(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )

    def scaled(self, factor: float) -> HistogramData:
        """The same counts with every value multiplied by ``factor`` (unit changes)."""
        return HistogramData(
            tuple(b * factor for b in self.bounds), self.cumulative, self.count, self.sum * factor
        )

    def quantile(self, q: float) -> float | None:
        """Quantile ``q`` (0–1), interpolated linearly inside its bucket.

        As Prometheus' ``histogram_quantile``: the first bucket's lower bound is 0 (or its
        upper bound when that is negative); a rank in the ``+Inf`` bucket returns the
        largest finite bound. ``None`` with no observation.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile is in [0, 1], got {q!r}")
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank and cum > lower_count:
                if math.isinf(bound):
                    finite = [b for b in self.bounds if not math.isinf(b)]
                    return finite[-1] if finite else None
                if bound <= 0:
                    return bound
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                    cum - lower_count
                )
            lower_bound, lower_count = bound, cum
        return None

    def cdf(self) -> list[tuple[float, float]]:
        """``(upper bound, fraction ≤ it)`` per finite bucket: the histogram as a CDF."""
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return []
        return [
            (b, c / total)
            for b, c in zip(self.bounds, self.cumulative, strict=True)
            if not math.isinf(b)
        ]


_Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """A parsed ``/metrics`` page.

    Attributes:
        t_ns: when it was scraped (the caller's clock; ``0`` when unknown).
        types: each metric family's declared type, by family name.
        samples: every sample's value, by sample name, then by its labels.
    """

    t_ns: int
    types: dict[str, str] = field(default_factory=dict)
    samples: dict[str, dict[_Labels, float]] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        """Every sample name."""
        return set(self.samples)

    def has(self, name: str) -> bool:
        """Whether ``name`` was exported, as a sample or as a family (a histogram's name)."""
        return name in self.samples or name in self.types or f"{name}_total" in self.samples

    def value(self, name: str, *, mean: bool = False) -> float | None:
        """The sum (or the mean) over label sets of sample ``name``; ``None`` if absent."""
        series = self.samples.get(name)
        if not series:
            return None
        total = math.fsum(series.values())
        return total / len(series) if mean else total

    def counter(self, name: str) -> float | None:
        """A counter, whether it is sampled as ``name_total`` or as ``name``."""
        if not name.endswith("_total"):
            v = self.value(f"{name}_total")
            if v is not None:
                return v
        return self.value(name)

    def histogram(self, name: str) -> HistogramData | None:
        """Histogram ``name`` with its label sets (models, engines) summed; ``None`` if absent."""
        buckets = self.samples.get(f"{name}_bucket")
        if not buckets:
            return None
        by_le: dict[float, float] = {}
        for labels, v in buckets.items():
            le = dict(labels).get("le")
            if le is None:
                continue
            bound = float(le)  # a number: parse_metrics checked it
            by_le[bound] = by_le.get(bound, 0.0) + v
        if not by_le:
            return None
        bounds = tuple(sorted(by_le))
        count = self.value(f"{name}_count")
        total = by_le[bounds[-1]] if math.isinf(bounds[-1]) else None
        return HistogramData(
            bounds,
            tuple(by_le[b] for b in bounds),
            count if count is not None else (total or 0.0),
            self.value(f"{name}_sum") or 0.0,
        )


def parse_metrics(text: str, *, t_ns: int = 0) -> MetricsSnapshot:
    """Parse a Prometheus text exposition (``text/plain; version=0.0.4``).

    Values are kept as given, NaN and ±Inf too (:func:`~agentflow.report.server_section`
    leaves those out of a report); a bucket's ``le`` must be a number (``+Inf`` included).

    Raises:
        ValueError: the text is not in the exposition format (a :class:`ConfigError`,
            naming the sample, for a bucket whose ``le`` is not a number).
    """
    types: dict[str, str] = {}
    samples: dict[str, dict[_Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            if s.name.endswith("_bucket") and "le" in s.labels:
                _check_le(s.name, s.labels)
            key = tuple(sorted(s.labels.items()))
            series = samples.setdefault(s.name, {})
            series[key] = series.get(key, 0.0) + float(s.value)
    return MetricsSnapshot(t_ns, types, samples)


def _check_le(name: str, labels: dict[str, str]) -> None:
    """A bucket's upper bound is a number, or ``+Inf``: NaN orders nowhere."""
    le = labels["le"]
    try:
        bound = float(le)
    except ValueError:
        bound = math.nan
    if math.isnan(bound) or bound == -math.inf:
        shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
        raise ConfigError(f"sample {name}{{{shown}}}: le {le!r} is not a bucket's upper bound")


def quick_values(text: str, names: Sequence[str], means: Iterable[str] = ()) -> dict[str, float]:
    """The values of a few samples, by a line scan (no full parse): for frequent sampling.

    Each of ``names`` is summed over its label sets (averaged for those in ``means``);
    absent names are left out. It reads what :func:`parse_metrics` reads: a name and its
    value separated by any whitespace, label values holding ``}`` or ``#``, and not an
    exemplar's value (``… 100 # {trace_id="a"} 0.5``). Costs ~1 µs per line of the page:
    only the lines that start with one of ``names`` are read further.
    """
    wanted = tuple(names)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(wanted):
            continue
        name, brace, rest = line.partition("{")
        if not brace or " " in name or "\t" in name:  # NAME VALUE, NAME {LABELS} VALUE …
            name, _, rest = line.replace("\t", " ").partition(" ")
            rest = rest.lstrip()
            brace = "{" if rest.startswith("{") else ""
            rest = rest[len(brace) :]
        if brace:
            end = _labels_end(rest)
            if end < 0:
                continue
            rest = rest[end + 1 :]
        if name not in wanted:
            continue
        parts = rest.split(None, 1)  # the value; then a timestamp, an exemplar
        if not parts:
            continue
        try:
            v = float(parts[0])
        except ValueError:
            continue
        sums[name] = sums.get(name, 0.0) + v
        counts[name] = counts.get(name, 0) + 1
    mean_set = set(means)
    return {k: (v / counts[k] if k in mean_set else v) for k, v in sums.items()}


def _labels_end(text: str) -> int:
    """Where the label set ends in ``text``, what follows its ``{``: the index of its
    closing ``}`` (its values are quoted, with ``\\`` escapes: a ``}`` inside one is not
    it); -1 if none closes it."""
    end = text.find("}")
    if end >= 0 and text.count('"', 0, end) % 2 == 0 and "\\" not in text[:end]:
        return end  # the usual case: no value holds a "}"
    quoted = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1  # the next character is escaped
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "}":
            return i
        i += 1
    return -1
