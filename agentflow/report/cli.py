"""``agentflow report``: JSON reports in, one self-contained HTML page (and PNGs) out.

::

    agentflow report run.json --html report.html
    agentflow report c16.json c64.json c256.json --html sweep.html --png-dir figs/
    agentflow report run.json --server-metrics before.prom after.prom --html report.html
    agentflow report --store runs.db RUN_ID --json run.json     # a recorded run, even partial
    agentflow report --store runs.db RUN_ID --server-metrics before.prom after.prom --html r.html

``agentflow.cli`` wires it in with :func:`add_parser`; :func:`run` does the work and
returns the exit status. Bad input raises :class:`~agentflow.ConfigError` (the entry
point prints it on one line and exits 2); output paths are checked before any figure
is drawn. Runs read from a ``--store`` are drawn like report files (labels, server
metrics, ``--write-json``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentflow._cli_signals import run_command
from agentflow._cliargs import (
    check_no_overwrite,
    check_output_dir,
    check_output_file,
    check_store_file,
    store_inputs,
)
from agentflow._errors import ConfigError
from agentflow._files import write_text_file

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` command to an ``add_subparsers()`` object; returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="draw JSON run reports as an HTML page with figures (needs agentflow[report])",
        description=(
            "Draw one or more agentflow.report/2 JSON files (FleetStats.report(), "
            "`agentflow demo --report`) as one self-contained HTML page: latency CDFs, "
            "per-agent decode speed, interactivity vs throughput, throughput, context "
            "growth, cache hit rate and KV usage over time, the server's /metrics beside "
            "the client's, and several runs side by side."
        ),
    )
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN.json",
        help="report files (with --store: run ids in the store)",
    )
    p.add_argument(
        "--store",
        type=Path,
        help="read the runs from this SQLite run store (finished or partial runs)",
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="OUT.json",
        help="with --store: write the run's report JSON here (with its server section when "
        "--server-metrics is given); without --html, --png-dir, --json or --write-json it "
        "goes to standard output",
    )
    p.add_argument("--html", type=Path, help="write the HTML page here")
    p.add_argument("--png-dir", type=Path, help="also write each figure as DIR/KEY.png")
    p.add_argument(
        "--label",
        action="append",
        default=[],
        help="legend name of each run, in order (default: run.label, else the file name; "
        "with --store, the run id)",
    )
    p.add_argument("--title", default="agentflow report", help="the page's title")
    p.add_argument(
        "--gpus",
        type=_gpus,
        help="divide throughput by this many GPUs in the interactivity plot "
        "(default: each report's run.gpus)",
    )
    p.add_argument(
        "--server-metrics",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="two /metrics scrapes (text files) taken before and after the FIRST run: "
        "adds its server section (client vs server)",
    )
    p.add_argument(
        "--write-json",
        type=Path,
        metavar="OUT.json",
        help="with --server-metrics: write the first run's report with its server section",
    )
    p.set_defaults(func=run)
    return p


def _gpus(text: str) -> float:
    """``argparse`` type of ``--gpus``: a number of GPUs, more than 0 (fractions allowed:
    a share of one)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    """Run ``agentflow report``; returns the exit status (0; a reader of the JSON printed
    to standard output that went away raises ``BrokenPipeError``, which
    ``agentflow.cli.main`` turns into 141)."""
    from agentflow.report._build import write_report
    from agentflow.report._runs import Run, load_run

    store = args.store is not None
    what = "run ids" if store else "runs"
    if args.json is not None and not store:
        raise ConfigError("report: --json writes a run read from a --store")
    if not store and args.html is None and args.png_dir is None:
        raise ConfigError("report: give --html OUT.html and/or --png-dir DIR")
    labels: list[str] = list(args.label or [])
    if len(labels) > len(args.runs):
        raise ConfigError(f"report: {len(labels)} --label for {len(args.runs)} {what}")
    if args.write_json is not None and not args.server_metrics:
        raise ConfigError("report: --write-json needs --server-metrics")
    if store:
        check_store_file(args.store, "report")
        if args.json is not None and len(args.runs) != 1:
            raise ConfigError(f"report: --json writes one run, got {len(args.runs)} run ids")
    _check_no_overwrite(args)
    for out, flag in (
        (args.json, "--json"),
        (args.html, "--html"),
        (args.write_json, "--write-json"),
    ):
        if out is not None:
            check_output_file(out, flag)
    if args.png_dir is not None:
        check_output_dir(args.png_dir, "--png-dir")
    if store:
        ids = [str(r) for r in args.runs]
        reports = _from_store(args.store, ids)
        runs = [Run(labels[i] if i < len(labels) else ids[i], r) for i, r in enumerate(reports)]
    else:
        runs = [
            load_run(path, labels[i] if i < len(labels) else None)
            for i, path in enumerate(args.runs)
        ]
    if args.server_metrics:
        first = runs[0]
        report = dict(first.report)
        report["server"] = _server_from_files(*args.server_metrics, client=report)
        runs[0] = Run(first.label, report, first.path)
        if args.write_json is not None:
            write_text_file(args.write_json, _dumps(report))
    if args.json is not None:
        write_text_file(args.json, _dumps(runs[0].report))
    if args.html is None and args.png_dir is None:
        if args.json is None and args.write_json is None:  # --store alone: the JSON, printed
            reports_out = [r.report for r in runs]
            return _to_stdout(
                json.dumps(
                    reports_out[0] if len(runs) == 1 else reports_out, indent=2, allow_nan=False
                )
            )
        return 0
    figures = write_report(runs, args.html, png_dir=args.png_dir, title=args.title, gpus=args.gpus)
    out = []
    if args.html is not None:
        out.append(str(args.html))
    if args.png_dir is not None:
        out.append(f"{len(figures)} PNGs in {args.png_dir}")
    print(f"report: {len(figures)} figures → {', '.join(out)}", file=sys.stderr)
    return 0


def _dumps(report: Mapping[str, Any]) -> str:
    """A report as the JSON a report file holds: no NaN or infinity (``allow_nan=False``;
    a report file with one is refused when it is read)."""
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


def _to_stdout(text: str) -> int:
    """Print ``text``; returns the exit status, 0. A reader that has gone
    (``agentflow report --store … | head``) is ``agentflow.cli.main``'s to handle, as for
    every command: the rest is dropped quietly, status 141."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0


def _check_no_overwrite(args: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` if an output would overwrite an input or another output.

    ``agentflow report run.json --html run.json`` (a slip) would replace the measured
    report with the page; nothing is written until this passes.
    """
    from agentflow.report._build import FIGURE_KEYS

    inputs: list[tuple[str, Path]] = []
    if args.store is not None:
        inputs += store_inputs(args.store)
    else:
        inputs += [(f"the report {p}", p) for p in args.runs]
    if args.server_metrics:
        inputs += [(f"--server-metrics {p}", p) for p in args.server_metrics]
    outputs = [
        (flag, p)
        for flag, p in (
            ("--html", args.html),
            ("--json", args.json),
            ("--write-json", args.write_json),
        )
        if p is not None
    ]
    if args.png_dir is not None:
        outputs += [("--png-dir", args.png_dir / f"{key}.png") for key in FIGURE_KEYS]
    check_no_overwrite(outputs, inputs)


def _server_from_files(before: Path, after: Path, *, client: dict[str, Any]) -> dict[str, Any]:
    from agentflow.report._prom import parse_metrics
    from agentflow.report._server import server_section, went_down

    snaps = []
    for path in (before, after):
        try:
            snaps.append(parse_metrics(path.read_text("utf-8")))
        except OSError as exc:
            raise ConfigError(f"report: cannot read {path}: {exc}") from None
        except ValueError as exc:  # (prometheus_client's is bare for some pages: `{}`)
            why = str(exc) or "not in the text exposition format (NAME{LABELS} VALUE lines)"
            raise ConfigError(f"report: {path} is not a Prometheus text page: {why}") from None
    flags = f"--server-metrics {before} {after}"
    # A counter only grows while a server runs: one that went down means the files are in
    # the wrong order or the server restarted between them (or, for a histogram whose
    # buckets changed, another server), and every difference is nonsense.
    down = went_down(snaps[0], snaps[1])
    if down:
        raise ConfigError(
            f"report: {flags}: counters went down from the first scrape to the second "
            f"({', '.join(down)}): the scrapes are swapped (BEFORE first, then AFTER) or "
            "the server restarted between them"
        )
    section = server_section(snaps[0], snaps[1], client=client, url=str(after))
    section["series"] = {k: [] for k in section["series"]}  # no times in a file
    # Nor when the scrapes were taken: null (not measurable), never a made-up 0.0.
    section["source"].update(before_s=None, after_s=None)
    return section


def _from_store(path: Path, ids: list[str]) -> list[dict[str, Any]]:
    """``agentflow report --store PATH RUN_ID...``: the recorded runs (finished or
    partial) exported to report JSON; they are then drawn (and joined with
    ``--server-metrics``) like report files."""
    from agentflow.store import SQLiteStore, export_report

    async def export() -> list[dict[str, Any]]:
        # Reads only: no journal (its first segment, 8 MiB, would be made and deleted).
        async with SQLiteStore(path, journal=False) as store:
            return [await export_report(store, run_id) for run_id in ids]

    return run_command(export())
