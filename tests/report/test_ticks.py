"""Log-axis tick labels: short numbers, never matplotlib's ``1e+06``; and the figures with a
log axis label it with them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentflow.report import Run, _fig_compare, _fig_run
from agentflow.report._canvas import tick, to_png
from agentflow.stats import FleetStats


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (0.0, "0"),
        (1e-7, "10⁻⁷"),
        (1.5e-5, "1.5×10⁻⁵"),
        (1e-4, "0.0001"),
        (0.001, "0.001"),
        (0.25, "0.25"),
        (1.0, "1"),
        (50.0, "50"),
        (999.5, "1,000"),
        (1000.0, "1,000"),
        (5000.0, "5,000"),
        (9999.0, "10k"),
        (10_000.0, "10k"),
        (20_000.0, "20k"),
        (100_000.0, "100k"),
        (250_000.0, "250k"),
        (999_999.0, "1M"),
        (1e6, "1M"),
        (2e6, "2M"),
        (1.23e7, "12.3M"),
        (1e9, "1G"),
        (5e11, "500G"),
        (1e12, "1T"),
        (999.6e12, "10¹⁵"),
        (2e15, "2×10¹⁵"),
        (1e18, "10¹⁸"),
        (-2e6, "-2M"),
        (-1e-6, "-10⁻⁶"),
        (float("nan"), ""),
        (float("inf"), ""),
    ],
)
def test_tick_labels_are_short_and_never_in_e_notation(value: float, label: str) -> None:
    assert tick(value) == label


def test_every_power_of_ten_and_its_2x_5x_are_readable() -> None:
    for e in range(-12, 25):
        for m in (1, 2, 5):
            s = tick(m * 10.0**e)
            assert "e" not in s and len(s) <= 8, (m, e, s)


def _drawn(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    """The matplotlib figures ``module`` draws, kept as they go to PNG."""
    figures: list[Any] = []

    def keep(fig: Any) -> bytes:
        figures.append(fig)
        return to_png(fig)

    monkeypatch.setattr(module, "to_png", keep)
    return figures


def _labels(axis: Any) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_a_histogram_of_a_million_token_prompts_labels_its_log_axis_in_short_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figures = _drawn(monkeypatch, _fig_run)
    prompts = [10.0 * 3**k for k in range(12)]  # 10 … 1,771,470: five decades
    samples = [{"prompt_tokens": p, "output_tokens": 20 + k} for k, p in enumerate(prompts)]
    _fig_run.lengths([Run("x", {"samples": samples})])
    (fig,) = figures
    fig.canvas.draw()
    prompt_ax = fig.axes[0]
    assert prompt_ax.get_xscale() == "log"
    labels = _labels(prompt_ax.xaxis)
    assert {"100", "1,000", "10k", "100k", "1M"} <= set(labels), labels
    assert not any("e+" in s or "$" in s for s in labels), labels


def test_the_run_comparison_labels_its_latency_axis_in_short_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its log axis was matplotlib's own (``$10^{3}$`` in mathtext); now it is the one the
    other figures' log axes use."""
    figures = _drawn(monkeypatch, _fig_compare)
    runs = []
    for label, scale in (("a", 1.0), ("b", 3.0)):
        report = copy.deepcopy(FleetStats().report())
        for k, key in enumerate(("ttft_s", "tpot_s", "itl_s", "e2e_s")):
            report["distributions"][key] = {"count": 9, "p50": scale * 10.0**k / 100}
            report["distributions"][key]["p99"] = scale * 10.0**k / 10
        runs.append(Run(label, report))
    assert _fig_compare.compare_runs(runs) is not None
    (fig,) = figures
    fig.canvas.draw()
    latency = fig.axes[0]
    assert latency.get_yscale() == "log"
    labels = _labels(latency.yaxis)
    assert {"10", "100", "1,000"} <= set(labels), labels
    assert not any("e+" in s or "$" in s for s in labels), labels
