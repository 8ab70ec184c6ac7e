"""Service-level objectives, and the goodput they define.

A turn *meets* an :class:`SLO` when every bound the SLO sets holds for it; goodput is
what met the SLO, per second of the run (turns/s and output tokens/s), as DistServe and
vLLM's benchmark define it. An agent meets an SLO when every one of its turns did.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentflow._errors import ConfigError
from agentflow._metrics import TurnMetrics

__all__ = ["SLO", "check_slos", "slo_table"]

_BOUNDS = ("queue_wait_s", "ttft_s", "tpot_s", "e2e_s", "itl_max_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO:
    """Upper bounds on one turn's latencies; ``None`` = no bound on that figure.

    A bound on ``ttft_s`` fails a turn that produced no output (it has no TTFT). A bound
    on ``tpot_s`` passes a turn with fewer than two output tokens (it had no decode
    phase to judge), as in vLLM's benchmark, and fails one with two or more whose TPOT is
    unknown (no output chunk, or every output chunk in one read): a turn that cannot
    be shown to meet a bound does not meet it. ``itl_max_s`` bounds the longest gap
    between two output chunks of the turn (a stall); a turn with fewer than two chunks
    passes it.

    Example: ``SLO(ttft_s=2.0, tpot_s=0.010)`` — first token within 2 s and at least
    100 tok/s of decode, for every turn.

    Attributes:
        ttft_s: time to first token, seconds.
        tpot_s: time per output token, seconds.
        e2e_s: request sent → end of stream, seconds.
        queue_wait_s: turn ready → request sent (admission wait), seconds.
        itl_max_s: the longest gap between output chunks, seconds.
        name: the SLO's key in reports; built from the bounds when not given
            (``"ttft<=2s,tpot<=10ms"``).
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    queue_wait_s: float | None = None
    itl_max_s: float | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        bounds = self.bounds()
        if not bounds:
            raise ConfigError("an SLO needs at least one bound (ttft_s, tpot_s, e2e_s, …)")
        for key, value in bounds.items():
            # finite: an infinite bound bounds nothing and would put Infinity in the
            # report's JSON (and 'e2e<=infs' in its label); leave the bound out instead
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and value > 0):
                raise ConfigError(f"SLO {key} must be a finite number > 0, got {value!r}")

    def bounds(self) -> dict[str, float]:
        """The bounds this SLO sets, by figure name."""
        return {k: v for k in _BOUNDS if (v := getattr(self, k)) is not None}

    @property
    def label(self) -> str:
        """``name``, or a name built from the bounds: ``"ttft<=2s,tpot<=10ms"``."""
        if self.name:
            return self.name
        return ",".join(f"{k.removesuffix('_s')}<={_secs(v)}" for k, v in self.bounds().items())

    def met_by(self, m: TurnMetrics) -> bool:
        """Whether turn ``m`` meets every bound."""
        if self.ttft_s is not None and (m.ttft_s is None or m.ttft_s > self.ttft_s):
            return False
        if self.tpot_s is not None and not _tpot_met(self.tpot_s, m):
            return False
        if self.e2e_s is not None and m.e2e_s > self.e2e_s:
            return False
        if self.queue_wait_s is not None and m.queue_wait_s > self.queue_wait_s:
            return False
        return not (self.itl_max_s is not None and m.itl_s and max(m.itl_s) > self.itl_max_s)

    def failed_bounds(self, m: TurnMetrics) -> list[str]:
        """The names of the bounds turn ``m`` misses (empty when it meets the SLO)."""
        return [k for k, v in self.bounds().items() if not _bound_met(k, v, m)]


def check_slos(slos: Iterable[SLO]) -> tuple[SLO, ...]:
    """Validate a list of SLOs for a report: each an :class:`SLO`, unique labels. Returns
    them as a tuple.

    Raises:
        ConfigError: ``slos`` is not an iterable of :class:`SLO`, or two share a label.
    """
    if isinstance(slos, SLO):
        raise ConfigError(f"slos must be a list of SLOs, got the one SLO {slos!r}; use [slo]")
    try:
        out = tuple(slos)
    except TypeError:
        raise ConfigError(f"slos must be an iterable of SLO, got {slos!r}") from None
    for slo in out:
        if not isinstance(slo, SLO):
            raise ConfigError(f"slos must hold SLO objects, got {slo!r}")
    labels = [s.label for s in out]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(f"two SLOs share the label {dupes[0]!r}; give them distinct names")
    return out


def _bound_met(key: str, bound: float, m: TurnMetrics) -> bool:
    if key == "ttft_s":
        return m.ttft_s is not None and m.ttft_s <= bound
    if key == "tpot_s":
        return _tpot_met(bound, m)
    if key == "e2e_s":
        return m.e2e_s <= bound
    if key == "queue_wait_s":
        return m.queue_wait_s <= bound
    return not m.itl_s or max(m.itl_s) <= bound


def _tpot_met(bound: float, m: TurnMetrics) -> bool:
    """TPOT within ``bound``; unknown passes only without a decode phase (< 2 tokens)."""
    return m.output_tokens < 2 if m.tpot_s is None else m.tpot_s <= bound


def _secs(v: float) -> str:
    if v < 1:
        return f"{v * 1e3:g}ms"
    return f"{v:g}s"


def slo_table(slos: Sequence[SLO]) -> list[dict[str, object]]:
    """The SLOs as report entries: ``{"name": label, "bounds": {...}}``."""
    return [{"name": s.label, "bounds": s.bounds()} for s in slos]
