"""The HTML report: every figure present with its title and alt text, PNGs that decode,
nothing fetched from elsewhere; figures drawn from thin reports say what is missing."""

from __future__ import annotations

import base64
import copy
import io
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from matplotlib.cbook import is_math_text
from matplotlib.image import imread

from agentflow.report import FIGURE_KEYS, Figure, Run, make_figures, write_report
from agentflow.report._canvas import number, plain
from agentflow.report._html import _num, lag_warning, render_html
from agentflow.stats import FleetStats
from tests.report.runs import virtual_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """Collects each figure section's id, heading, image and caption, and every URL."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, dict[str, Any]] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._section: str | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        for key in ("src", "href"):
            if key in a and not a[key].startswith(("#", "data:")):
                self.urls.append(a[key])
        if tag == "section" and "figure" in a.get("class", ""):
            self._section = a["id"]
            self.figures[a["id"]] = {"h2": "", "caption": "", "imgs": []}
        elif self._section and tag == "img":
            self.figures[self._section]["imgs"].append(a)
        elif self._section and tag in ("h2", "p"):
            self._in = tag

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        if tag in ("h2", "p"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._section and self._in:
            key = "h2" if self._in == "h2" else "caption"
            self.figures[self._section][key] += data


def _decode(src: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    raw = base64.b64decode(src[len(prefix) :], validate=True)
    assert raw.startswith(PNG_MAGIC)
    img = imread(io.BytesIO(raw), format="png")
    return int(img.shape[1]), int(img.shape[0])


@pytest.fixture(scope="module")
def two_runs() -> list[dict[str, Any]]:
    """Two load levels of the demo's workload, each with a server section and its turns."""
    return [virtual_report(8, label="8 agents"), virtual_report(24, seed=1, label="24 agents")]


@pytest.fixture(scope="module")
def drawn(
    two_runs: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Figure], Path]:
    """The two runs drawn once: the figures and the directory with report.html and png/."""
    d = tmp_path_factory.mktemp("report")
    figures = write_report(two_runs, d / "report.html", png_dir=d / "png", title="two runs")
    return figures, d


def test_every_figure_is_in_the_page_with_title_alt_and_a_png(
    drawn: tuple[list[Figure], Path],
) -> None:
    figures, tmp_path = drawn
    out = tmp_path / "report.html"
    assert [f.key for f in figures] == list(FIGURE_KEYS)  # two runs + server: all of them
    page = _Page()
    page.feed(out.read_text("utf-8"))
    assert set(page.figures) == {f"fig-{k}" for k in FIGURE_KEYS}
    for f in figures:
        got = page.figures[f"fig-{f.key}"]
        assert got["h2"] == f.title
        assert f.caption.split(".")[0] in got["caption"]
        (img,) = got["imgs"]
        assert img["alt"] == f.alt and len(img["alt"]) > 40
        width, height = _decode(img["src"])
        assert width >= 800 and height >= 400
        assert (tmp_path / "png" / f"{f.key}.png").read_bytes() == f.png
    # Self-contained: no scripts, stylesheets or images from anywhere else.
    assert page.urls == []
    assert not page.tags & {"script", "link", "iframe"}


def test_titles_say_what_is_drawn(drawn: tuple[list[Figure], Path]) -> None:
    figures = {f.key: f for f in drawn[0]}
    assert figures["latency_cdf"].title == "Latency CDFs: TTFT, TPOT, ITL, E2E"
    assert figures["interactivity"].title == "Interactivity vs throughput"
    assert "KV-cache usage" in figures["cache_kv"].title
    # The report kept each turn: single sessions are drawn, and the caption says so.
    assert "Thin lines: single sessions" in figures["context_growth"].caption
    assert "not joined" not in figures["interactivity"].caption  # same time scale


def test_the_page_has_the_runs_and_the_server_cross_check(
    two_runs: list[dict[str, Any]], drawn: tuple[list[Figure], Path]
) -> None:
    text = (drawn[1] / "report.html").read_text("utf-8")
    assert '<table id="runs">' in text and "8 agents" in text and "24 agents" in text
    assert 'id="server"' in text and "output_tokens" in text
    f = two_runs[0]["fleet"]
    assert f"{f['output_tokens']:,}" in text  # the client's count, beside the server's


def test_one_thin_run_draws_what_it_can_and_says_what_is_missing() -> None:
    report = virtual_report(4, samples=False, server=False)
    figures = {f.key: f for f in make_figures([report])}
    assert set(figures) == set(FIGURE_KEYS) - {"client_vs_server", "compare"}
    assert "FleetStats(keep_samples=True)" in figures["context_growth"].caption
    assert "No KV usage" in figures["cache_kv"].caption
    assert "--gpus" in figures["interactivity"].caption


def test_an_empty_report_still_draws() -> None:
    """No turn at all (every request failed): every figure is drawn and says 'no data'."""
    report = FleetStats().report()
    figures = make_figures([Run("empty", report)])
    assert {f.key for f in figures} >= {"latency_cdf", "decode_tps", "interactivity"}
    assert all(f.png.startswith(PNG_MAGIC) for f in figures)


def test_dollar_signs_in_labels_ids_and_names_are_drawn_as_written(
    two_runs: list[dict[str, Any]],
) -> None:
    """matplotlib reads text between two ``$`` as math: an invalid formula stopped the
    report, a valid one was drawn garbled. Every string that reaches a figure from a run
    (labels, session ids, tool names, the server's dialect) is drawn as plain text."""
    evil = r"$\bad{$"
    runs = []
    for i, original in enumerate(two_runs):
        report = copy.deepcopy(original)
        for s in report["samples"]:
            s["session_id"] = evil + s["session_id"]
        report["tools"] = {evil + name: t for name, t in report["tools"].items()}
        report["server"]["source"]["dialect"] = evil
        runs.append(Run(f"{evil} run {i}", report))
    figures = make_figures(runs)
    assert [f.key for f in figures] == list(FIGURE_KEYS)
    for text in ("cost $5 vs $10", evil, r"a\$b", "$"):
        assert not is_math_text(plain(text))
        assert plain(text).replace(r"\$", "$") == text  # what matplotlib draws of plain text


def test_a_label_that_starts_with_an_underscore_stays_in_the_legend() -> None:
    """matplotlib leaves a label that starts with ``_`` out of the legend: a run labelled
    ``_baseline`` (or an agent ``_helper``) vanished from every legend of the report."""
    from matplotlib.figure import Figure as MplFigure

    ax = MplFigure().subplots()
    for label in ("_baseline", "candidate", "_$x$"):
        ax.plot([0, 1], [0, 1], label=plain(label))
    legend = ax.legend()
    drawn = [t.get_text().replace("\u200b", "").replace(r"\$", "$") for t in legend.get_texts()]
    assert drawn == ["_baseline", "candidate", "_$x$"]
    assert plain("run_1") == "run_1"  # only a leading underscore is touched


def test_the_lag_warning_skips_a_zero_median() -> None:
    """A median TTFT of 0 (a server that answered at once) is no yardstick for the lag:
    no division by it; the ITL, when there is one, still is."""
    report: dict[str, Any] = {
        "run": {"loop_lag": {"p99_s": 0.002}},
        "distributions": {"ttft_s": {"count": 5, "p50": 0.0}},
    }
    assert lag_warning(Run("x", report)) is None
    report["distributions"]["itl_s"] = {"count": 5, "p50": 0.001}
    warning = lag_warning(Run("x", report))
    assert warning is not None and "200% of the median ITL" in warning and "TTFT" not in warning


def test_numbers_just_under_1000_are_not_in_scientific_notation() -> None:
    """``{:,.3g}`` rounds 999.7 to four digits and writes ``1e+03``; the one formatter of
    tables, bar labels and captions writes ``1,000``."""
    values = (12.345, 0.5, 999.4, 999.5, 999.7, -999.7, 1234.5, 25_310.0)
    expected = ["12.3", "0.5", "999", "1,000", "1,000", "-1,000", "1,234", "25,310"]
    assert [number(v) for v in values] == expected
    assert number(999.96, 4) == "1,000" and number(999.94, 4) == "999.9"
    assert _num(0.9997, scale=1e3, unit=" ms") == "1,000 ms" and _num(None) == "—"
    report = copy.deepcopy(FleetStats().report())
    report["fleet"]["output_tps"] = 999.7
    page = render_html([Run("x", report)], [], title="t")
    assert "e+03" not in page and "<td>1,000</td>" in page


def test_the_lag_warning_reads_a_blocked_loop_and_a_zero_median_itl() -> None:
    """A loop blocked 40 ms of every 80 showed only in ``wakeup_late_p99_s`` (in reports
    written before samples counted it), and its reads piled up so the median ITL was 0 —
    which made the warning skip its ITL test: a 40 ms lag behind an 8 s TTFT went unflagged."""
    report: dict[str, Any] = {
        "run": {"loop_lag": {"p99_s": 0.0004, "wakeup_late_p99_s": 0.041}},
        "distributions": {
            "ttft_s": {"count": 2, "p50": 8.0},
            "itl_s": {"count": 100, "p50": 0.0},
        },
    }
    warning = lag_warning(Run("x", report))
    assert warning is not None
    assert "40.00 ms at p99" in warning and "median ITL of 0" in warning
    assert "TTFT" not in warning  # 40 ms is 0.5 % of 8 s
    report["run"]["loop_lag"] = {"p99_s": 0.0004, "wakeup_late_p99_s": 0.0009}
    assert lag_warning(Run("x", report)) is None  # timer rounding on an idle loop
