"""Runs to report on: ``agentflow.report/2`` JSON files, loaded and labelled.

The report command reads only these files (and, optionally, two ``/metrics`` scrapes to
add a ``server`` section). A file of another schema version is refused with a message
that says which version was found.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentflow._errors import ConfigError

__all__ = [
    "SUPPORTED_SCHEMAS",
    "Run",
    "agent_decode_quantiles",
    "agent_decode_tps",
    "load_run",
    "run_samples",
    "runs_from_reports",
]

#: The report schema versions ``agentflow report`` reads.
SUPPORTED_SCHEMAS = ("agentflow.report/2",)


@dataclass(frozen=True)
class Run:
    """One run's report and the label it is drawn with.

    Attributes:
        label: the legend entry.
        report: the ``agentflow.report/2`` document.
        path: the file it came from, if any.
    """

    label: str
    report: Mapping[str, Any]
    path: Path | None = None

    @property
    def fleet(self) -> Mapping[str, Any]:
        """The report's ``fleet`` section."""
        return self.report.get("fleet") or {}

    @property
    def run(self) -> Mapping[str, Any]:
        """The report's free-form ``run`` settings."""
        return self.report.get("run") or {}

    @property
    def time_scale(self) -> float:
        """How much slower than the modelled deployment the server ran (1: real time)."""
        v = self.run.get("time_scale")
        return float(v) if isinstance(v, int | float) and v > 0 else 1.0

    @property
    def server(self) -> Mapping[str, Any] | None:
        """The ``server`` section (scraped ``/metrics``), if the report has one."""
        s = self.report.get("server")
        return s if isinstance(s, Mapping) else None

    def distribution(self, key: str) -> Mapping[str, Any] | None:
        """``distributions[key]`` when it holds at least one value."""
        d = (self.report.get("distributions") or {}).get(key)
        return d if isinstance(d, Mapping) and d.get("count") else None


def run_samples(run: Run) -> list[Mapping[str, Any]]:
    """The report's kept turns (``samples``; none when it keeps none)."""
    s = run.report.get("samples")
    return [x for x in s if isinstance(x, Mapping)] if isinstance(s, list) else []


def agent_decode_tps(run: Run) -> list[float]:
    """Each ``agents`` row's mean decode tok/s, where it has one (rows are read field by
    field: :func:`check_report` checks only that each is an object)."""
    rows = run.report.get("agents")
    out: list[float] = []
    for a in rows if isinstance(rows, list) else ():
        d = a.get("decode_tps") if isinstance(a, Mapping) else None
        v = d.get("mean") if isinstance(d, Mapping) else None
        if isinstance(v, int | float) and not isinstance(v, bool):
            out.append(float(v))
    return out


def agent_decode_quantiles(run: Run) -> dict[float, float]:
    """The quantiles of the agents' decode tok/s from ``per_agent.decode_tps`` (``min``
    as 0, ``max`` as 1, ``p50`` as 0.5 …) — for a report without ``agents`` rows (a bench
    level's keeps none); empty when it has rows, or no agent decoded."""
    rows = run.report.get("agents")
    d = (run.report.get("per_agent") or {}).get("decode_tps")
    if (isinstance(rows, list) and rows) or not isinstance(d, Mapping) or not d.get("count"):
        return {}
    out: dict[float, float] = {}
    for key, v in d.items():
        q = {"min": 0.0, "max": 1.0}.get(key)
        if q is None and isinstance(key, str) and key.startswith("p"):
            try:
                q = float(key[1:]) / 100
            except ValueError:
                continue
        if q is not None and 0 <= q <= 1 and isinstance(v, int | float) and not isinstance(v, bool):
            out[q] = float(v)
    return dict(sorted(out.items()))


def check_report(report: Any, where: str) -> Mapping[str, Any]:
    """``report`` if it is a report this version reads: its schema version, and valid
    against the shipped schema (``agentflow.stats.report_schema``; of the rows of
    ``agents`` and ``samples``, that each is an object — the figures read their fields
    one by one, and checking thousands of rows against the schema would cost more than
    drawing them).

    Raises:
        ConfigError: not a JSON object, another schema version, or not valid against the
            schema; the message gives the JSON path (``r.json: $.fleet.retries: None is
            not of type 'integer'``). Also when jsonschema (the ``report`` extra) is
            missing.
    """
    if not isinstance(report, Mapping):
        raise ConfigError(f"{where}: not an agentflow report (a JSON object was expected)")
    version = report.get("schema_version")
    if version not in SUPPORTED_SCHEMAS:
        found = "no schema_version" if version is None else f"schema_version {version!r}"
        raise ConfigError(
            f"{where}: {found}; agentflow report reads {', '.join(SUPPORTED_SCHEMAS)} "
            "(write one with FleetStats.report() or `agentflow demo --report`)"
        )
    for key in ("fleet", "distributions", "throughput"):
        if not isinstance(report.get(key), Mapping):
            raise ConfigError(f"{where}: the report has no {key!r} section")
    _check_schema(report, where)
    return report


#: Arrays of one row per session or per turn (thousands): checked to hold objects only.
_ROWS = ("agents", "samples")


def _check_schema(report: Mapping[str, Any], where: str) -> None:
    validator = _validator()  # first: without jsonschema, its ConfigError names the extra
    from jsonschema.exceptions import best_match

    head = {k: [] if k in _ROWS and isinstance(v, list) else v for k, v in report.items()}
    error = best_match(validator.iter_errors(head))
    if error is not None:
        raise ConfigError(f"{where}: {error.json_path}: {_short(error.message)}")
    for key in _ROWS:
        rows = report.get(key)
        for i, row in enumerate(rows if isinstance(rows, list) else ()):
            if not isinstance(row, Mapping):
                raise ConfigError(f"{where}: $.{key}[{i}]: {_short(repr(row))} is not an object")


@functools.cache
def _validator() -> Any:
    """The report schema's validator, made once (jsonschema: the ``report`` extra)."""
    try:
        from jsonschema import Draft202012Validator
    except ImportError:
        raise ConfigError(
            "agentflow report checks a report against its schema with jsonschema, which is "
            "not installed: pip install 'agentflow[report]'"
        ) from None
    from agentflow.stats import report_schema

    return Draft202012Validator(report_schema())


def _short(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters (a message may quote a whole section)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Read one report file.

    Raises:
        ConfigError: missing, not JSON (NaN and infinity are not), nested deeper than
            Python's ``json`` reads, or not a report this version reads.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text("utf-8"), parse_constant=_no_constant)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:  # not UTF-8, not JSON, a NaN
        raise ConfigError(f"{p}: cannot read a JSON report: {exc}") from None
    except RecursionError:  # arrays or objects nested deeper than Python's recursion limit
        raise ConfigError(f"{p}: cannot read a JSON report: nested too deeply") from None
    report = check_report(data, str(p))
    return Run(label or default_label(report, p.stem), report, p)


def _no_constant(name: str) -> Any:
    """``json.loads``' ``parse_constant``: a report holds no NaN or infinity (JSON has
    none; Python's ``json`` reads them unless told not to)."""
    raise ValueError(f"{name} is not a JSON number (a report holds no NaN or infinity)")


def default_label(report: Mapping[str, Any], fallback: str) -> str:
    """``run.label`` if the report names itself, else ``fallback``."""
    label = (report.get("run") or {}).get("label")
    return str(label) if label else fallback


def runs_from_reports(
    reports: Sequence[Mapping[str, Any]], labels: Sequence[str] | None = None
) -> list[Run]:
    """Runs from report documents already in memory (labels default to ``run 1``, …)."""
    out = []
    for i, r in enumerate(reports):
        check_report(r, f"report {i + 1}")
        label = labels[i] if labels and i < len(labels) else default_label(r, f"run {i + 1}")
        out.append(Run(label, r))
    return out
