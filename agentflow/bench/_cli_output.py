"""What ``agentflow bench`` writes and prints of a report: its JSON file, its HTML page
(through ``agentflow report``), and the table of its levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["bench_html", "bench_table", "shown_number", "shown_seconds", "write_bench_report"]


def write_bench_report(report: dict[str, Any], path: Path) -> None:
    """Write a bench report to ``path`` as JSON (in place once whole)."""
    from agentflow._files import write_text_file

    # plain JSON, as reports promise (a NaN would be a file `agentflow report` refuses)
    write_text_file(path, json.dumps(report, indent=2, allow_nan=False) + "\n")


def bench_html(report: dict[str, Any], path: Path) -> int:
    """Draw a bench report's levels with ``agentflow report`` (each level's first run is
    one run of the page: the interactivity-vs-throughput plot joins them into the curve);
    returns the number of figures.

    Raises:
        ConfigError: matplotlib (the ``report`` extra) is missing.
    """
    from agentflow.report import write_report
    from agentflow.report._runs import Run

    runs = [Run(lvl["load"]["label"], lvl["repeats"][0]["report"]) for lvl in report["levels"]]
    title = f"agentflow bench — {report['run']['target']}"
    return len(write_report(runs, path, title=title))


def bench_table(report: dict[str, Any]) -> Table:
    """The levels of a bench report as a table (what ``agentflow bench`` prints)."""
    from rich.table import Table

    slos = [s["name"] for s in report["run"]["slos"]]
    t = Table(title=f"agentflow bench — {report['run']['target']}", title_justify="left")
    for col in ("level", "sess/s", "req/s", "out tok/s", "decode tok/s/agent p50", "p99",
                "TTFT p50", "p99", "TPOT p50", "p99", *(f"goodput {n}" for n in slos),
                "cache hit", "saturated"):  # fmt: skip
        t.add_column(col, justify="right" if col not in ("level", "saturated") else "left")
    for lvl in report["levels"]:
        ci = lvl.get("ci95", {}).get("output_tps", {})
        tps = shown_number(lvl["output_tps"])
        if ci.get("half_width") is not None:
            tps += f" ±{ci['half_width']:,.0f}"
        rate = (
            lvl["achieved_rate"] if lvl["achieved_rate"] is not None else lvl["window_arrival_rate"]
        )
        t.add_row(
            lvl["load"]["label"],
            shown_number(rate, 2),
            shown_number(lvl["req_per_s"], 1),
            tps,
            shown_number(lvl["decode_tps_per_agent"]["p50"]),
            shown_number(lvl["decode_tps_per_agent"]["p99"]),
            shown_seconds(lvl["ttft_s"]["p50"]),
            shown_seconds(lvl["ttft_s"]["p99"]),
            shown_seconds(lvl["tpot_s"]["p50"]),
            shown_seconds(lvl["tpot_s"]["p99"]),
            *(
                "-" if g["turn_fraction"] is None else f"{g['turn_fraction']:.0%}"
                for g in lvl["goodput"]
            ),
            "-" if lvl["cache_hit_rate"] is None else f"{lvl['cache_hit_rate']:.0%}",
            "yes" if lvl["saturation"]["saturated"] else "",
        )
    knee = report.get("knee")
    t.caption = (
        f"knee (highest level not over-saturated): {knee['label']}" if knee else "knee: none found"
    ) + f" · stopped: {report['stopped']}"
    return t


def shown_number(x: float | None, digits: int = 0) -> str:
    """``x`` with thousands separators and ``digits`` decimals; ``-`` for ``None``."""
    return "-" if x is None else f"{x:,.{digits}f}"


def shown_seconds(x: float | None) -> str:
    """``x`` seconds in ms under one second, else in s; ``-`` for ``None``."""
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"
