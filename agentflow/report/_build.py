"""Reports to figures, figures to files: :func:`make_figures` and :func:`write_report`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow._errors import ConfigError
from agentflow._files import write_text_file
from agentflow.report._canvas import Figure
from agentflow.report._fig_compare import compare_runs
from agentflow.report._fig_latency import client_vs_server, decode_distribution, latency_cdf
from agentflow.report._fig_load import (
    cache_kv_over_time,
    context_growth,
    interactivity,
    throughput,
)
from agentflow.report._fig_run import errors_retries, lengths
from agentflow.report._fig_sessions import session_timeline, tool_durations
from agentflow.report._html import render_html
from agentflow.report._runs import Run, check_report, default_label

__all__ = ["FIGURE_KEYS", "make_figures", "write_report"]

#: Every figure a report can hold, in order (``client_vs_server`` needs a ``server``
#: section, ``compare`` two runs or more).
FIGURE_KEYS = (
    "latency_cdf",
    "decode_tps",
    "interactivity",
    "throughput",
    "errors_retries",
    "context_growth",
    "lengths",
    "session_timeline",
    "tool_durations",
    "cache_kv",
    "client_vs_server",
    "compare",
)


def _runs(runs: Sequence[Run | Mapping[str, Any]], caller: str) -> list[Run]:
    """``runs`` as :class:`Run` objects; a ConfigError naming ``caller`` if there is none."""
    out: list[Run] = []
    for i, r in enumerate(runs):
        if isinstance(r, Run):
            out.append(r)
        else:
            out.append(Run(default_label(r, f"run {i + 1}"), check_report(r, f"report {i + 1}")))
    if not out:
        raise ConfigError(f"{caller} needs at least one run, got none")
    return out


def make_figures(
    runs: Sequence[Run | Mapping[str, Any]], *, gpus: float | None = None
) -> list[Figure]:
    """Draw every figure the runs have data for, in :data:`FIGURE_KEYS` order.

    Args:
        runs: :class:`Run` objects, or ``agentflow.report/2`` documents.
        gpus: divide throughput by this many GPUs in the interactivity plot (default:
            each report's ``run.gpus``, else the fleet's throughput).

    Raises:
        ConfigError: no run, matplotlib (the ``report`` extra) is missing, a document is
            not a report this version reads, or ``gpus`` is not more than 0.
    """
    if gpus is not None and not (math.isfinite(gpus) and gpus > 0):
        raise ConfigError(f"gpus must be more than 0, got {gpus!r}")
    rs = _runs(runs, "make_figures")
    figures = [
        latency_cdf(rs),
        decode_distribution(rs),
        interactivity(rs, gpus=gpus),
        throughput(rs),
        errors_retries(rs),
        context_growth(rs),
        lengths(rs),
        session_timeline(rs),
        tool_durations(rs),
        cache_kv_over_time(rs),
        client_vs_server(rs),
        compare_runs(rs),
    ]
    return [f for f in figures if f is not None]


def write_report(
    runs: Sequence[Run | Mapping[str, Any]],
    html_path: str | Path | None,
    *,
    png_dir: str | Path | None = None,
    title: str = "agentflow report",
    gpus: float | None = None,
) -> list[Figure]:
    """Draw the figures and write the HTML page and/or one PNG per figure.

    Returns the figures drawn.

    Raises:
        ConfigError: as :func:`make_figures` (no run, among others).
        OSError: the page or a PNG could not be written.
    """
    rs = _runs(runs, "write_report")
    figures = make_figures(rs, gpus=gpus)
    if html_path is not None:
        # Whole or not at all: an interrupted write leaves the page that was there.
        write_text_file(Path(html_path), render_html(rs, figures, title=title))
    if png_dir is not None:
        d = Path(png_dir)
        d.mkdir(parents=True, exist_ok=True)
        for f in figures:
            (d / f"{f.key}.png").write_bytes(f.png)
    return figures
