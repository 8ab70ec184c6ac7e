"""Reports written before fields added within ``agentflow.report/2`` (``fleet.prompt_tps``,
``fleet.total_tps``, ``throughput.errors``, ``throughput.retries``) still validate against
the shipped schema, and ``agentflow report`` still draws them."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from agentflow.demo.run import DemoConfig, run_demo
from agentflow.stats import report_schema
from tests.report.test_cli import _run

#: The fields added within report/2, by section: optional in the schema.
ADDED = {"fleet": ("prompt_tps", "total_tps"), "throughput": ("errors", "retries")}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``agentflow demo --virtual --report`` writes now."""
    path = tmp_path_factory.mktemp("demo") / "demo.json"
    config = DemoConfig(agents=5, turns=(2, 4), virtual=True, live=False, report=path)
    run_demo(config, console=Console(file=io.StringIO(), width=100))
    report: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return report


def old_shape(report: dict[str, Any]) -> dict[str, Any]:
    old = copy.deepcopy(report)
    for section, keys in ADDED.items():
        for k in keys:
            del old[section][k]
    return old


def validator() -> jsonschema.Draft202012Validator:
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_both_shapes_validate_and_new_reports_carry_the_fields(fresh: dict[str, Any]) -> None:
    v = validator()
    v.validate(fresh)
    for section, keys in ADDED.items():
        assert all(k in fresh[section] for k in keys)  # always written
    v.validate(old_shape(fresh))
    # Optional is not anything goes: a wrong type in an added field is still refused.
    bad = copy.deepcopy(fresh)
    bad["throughput"]["errors"] = ["three"]
    assert not v.is_valid(bad)
    # The fields that were in report/2 from the start stay required.
    gone = copy.deepcopy(fresh)
    del gone["fleet"]["output_tps"]
    assert not v.is_valid(gone)


def _runs_table(html: str) -> str:
    m = re.search(r'<table id="runs">.*?</table>', html, re.S)
    assert m is not None
    return m.group(0)


def test_agentflow_report_draws_an_old_report(fresh: dict[str, Any], tmp_path: Path) -> None:
    new_json, old_json = tmp_path / "new.json", tmp_path / "old.json"
    new_json.write_text(json.dumps(fresh))
    old_json.write_text(json.dumps(old_shape(fresh)))
    new_html, old_html = tmp_path / "new.html", tmp_path / "old.html"
    assert _run(str(new_json), "--html", str(new_html), "--label", "run") == 0
    assert _run(str(old_json), "--html", str(old_html), "--label", "run") == 0
    new, old = new_html.read_text("utf-8"), old_html.read_text("utf-8")
    # The runs table is the same: total tok/s is worked out from the tokens and duration.
    assert fresh["fleet"]["total_tps"] is not None
    assert _runs_table(old) == _runs_table(new)
    # The errors/retries figure says the old report has no time series for them.
    assert 'id="fig-errors_retries"' in old
    assert "no time series of errors and retries" in old
    assert "no time series of errors and retries" not in new
