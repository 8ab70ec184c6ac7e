"""make_figures and write_report with no run raise the ConfigError they document (a
caller's mistake, caught with the library's other configuration errors), not a bare
ValueError."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow._errors import ConfigError
from agentflow.report import make_figures, write_report


def test_make_figures_with_no_run() -> None:
    with pytest.raises(ConfigError, match="make_figures needs at least one run"):
        make_figures([])


def test_write_report_with_no_run_writes_nothing(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    with pytest.raises(ConfigError, match="write_report needs at least one run"):
        write_report([], page, png_dir=tmp_path / "png")
    assert not page.exists() and not (tmp_path / "png").exists()
