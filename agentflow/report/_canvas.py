"""matplotlib, imported lazily, drawn off-screen: figures to PNG bytes.

matplotlib is the ``report`` extra. It is imported only when a figure is drawn, and
only its object-oriented API is used (``matplotlib.figure.Figure`` on an Agg canvas):
no pyplot, so no global backend is switched and nothing opens a window.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

__all__ = ["COLORS", "Figure", "empty_note", "new_figure", "number", "plain", "tick", "to_png"]

#: Run colours, in order (colour-blind-safe, Okabe–Ito).
COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
#: The server's colour in client-vs-server figures.
SERVER_COLOR = "#555555"
DPI = 100


@dataclass(frozen=True)
class Figure:
    """One drawn figure of a report.

    Attributes:
        key: a stable identifier (the HTML element id is ``fig-<key>``; the PNG file name).
        title: what the figure shows, as its heading.
        alt: a one-sentence description (the image's alt text).
        caption: how to read it.
        png: the image.
    """

    key: str
    title: str
    alt: str
    caption: str
    png: bytes


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ConfigError(
            "agentflow report draws its figures with matplotlib, which is not installed: "
            "pip install 'agentflow[report]'"
        ) from exc
    return matplotlib


def new_figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (9.0, 5.0)) -> Any:
    """A figure and its axes (a flat list), on an Agg canvas."""
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def to_png(fig: MplFigure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def number(x: float, digits: int = 3) -> str:
    """``x`` for a reader: ``digits`` significant digits below 1000, whole numbers with
    thousands separators from there (``12.3``, ``999``, ``1,000``, ``25,310``).

    ``{:,.3g}`` alone turns a value in [999.5, 1000) into ``1e+03`` (it rounds to four
    digits); such a value is written as the whole number it rounds to.
    """
    s = f"{x:,.{digits}g}"
    return f"{x:,.0f}" if abs(x) >= 1000 or "e+" in s else s


#: A log axis' large ticks: the scale each suffix stands for, largest first.
_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def tick(v: float) -> str:
    """A log axis' tick label: short, to three significant digits, never ``1e+06``.

    From 0.0001 to 9,999 it is :func:`number` (``0.001``, ``2``, ``50``, ``1,000``,
    ``5,000``), as the report's tables write numbers; from 10,000 a suffix keeps it short
    (``10k``, ``250k``, ``1M``, ``2.5G``, up to ``999T``); beyond either end, a power of ten
    (``10⁻⁵``, ``2×10¹⁵``). ``v`` is rounded first, so 999,999 is ``1M``, not ``1,000k``.
    """
    if not math.isfinite(v):
        return ""
    r = float(f"{v:.3g}")
    a = abs(r)
    if a == 0 or 1e-4 <= a < 1e4:
        return number(r)
    if 1e4 <= a < 1e15:
        scale, suffix = next((s, x) for s, x in _SUFFIXES if a >= s)
        return f"{r / scale:.3g}{suffix}"
    mantissa, exponent = f"{r:.2e}".split("e")
    m = f"{float(mantissa):g}"
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return m[:-1] + power if m in ("1", "-1") else f"{m}×{power}"


def plain(text: str) -> str:
    """``text`` (a run label, session id, tool name: anything from a report or a user)
    escaped so that matplotlib draws it as written.

    matplotlib reads a string with an even number of unescaped ``$`` as mathtext: ``cost $5 vs
    $10`` would be drawn in math italics, and ``$\\foo$`` would stop the whole report with
    a parse error. Every ``$`` escaped (``\\$``) makes the string plain text, which
    matplotlib then draws with the escapes removed (an ``\\$`` already in ``text`` stays
    ``\\$``). This, rather than switching mathtext off, keeps matplotlib's own tick
    labels, which may use it.

    A text that starts with ``_`` (a run labelled ``_baseline``, an agent ``_helper``) is
    one matplotlib leaves out of every legend; a zero-width space before it keeps it in,
    drawn as written.
    """
    text = text.replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def empty_note(ax: Axes, text: str) -> None:
    """Write ``text`` in the middle of an empty plot (and hide its ticks)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def color(i: int) -> str:
    """The colour of run ``i``."""
    return COLORS[i % len(COLORS)]


def style(ax: Axes, *, title: str | None = None, xlabel: str = "", ylabel: str = "") -> None:
    """Grid, labels and title."""
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def bucket_steps(
    t: Sequence[Any], dt: Sequence[Any], y: Sequence[Any]
) -> tuple[list[float], list[float]]:
    """Points for ``step(where="post")`` of per-bucket values: bucket *i* spans
    ``[t[i], t[i] + dt[i])``; ``None`` becomes a gap (NaN); the last bucket is drawn to
    its end."""
    n = min(len(t), len(dt), len(y))
    if n == 0:
        return [], []
    xs = [float(t[i]) for i in range(n)]
    ys = [float(v) if isinstance(v, int | float) else math.nan for v in y[:n]]
    xs.append(float(t[n - 1]) + float(dt[n - 1] or 0.0))
    ys.append(ys[-1])
    return xs, ys


def gaps(t: Sequence[Any], y: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``t`` and ``y`` as floats, ``None`` as NaN (a gap in a line)."""
    n = min(len(t), len(y))
    return [float(x) for x in t[:n]], [
        float(v) if isinstance(v, int | float) else math.nan for v in y[:n]
    ]


def log_axis(ax: Axes, axis: str = "x") -> None:
    """A log scale labelled with :func:`tick`'s short numbers (``2``, ``50``, ``1,000``,
    ``100k``, ``1M``); on an axis
    spanning less than about two decades, minor ticks at 2× and 5× are labelled too, and
    inside one decade every minor tick is."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def minor(v: float, _: Any) -> str:
        if v <= 0:
            return ""
        mantissa = round(v / 10 ** math.floor(math.log10(v)))
        return tick(v) if mantissa in (2, 5) else ""

    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a.set_major_formatter(FuncFormatter(lambda v, _: tick(v)))
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    if lo > 0 and hi / lo < 10:  # inside one decade there may be no major tick: label all
        a.set_minor_formatter(FuncFormatter(lambda v, _: tick(v)))
    else:
        a.set_minor_formatter(FuncFormatter(minor) if lo > 0 and hi / lo < 150 else NullFormatter())


def finite(values: Sequence[Any]) -> list[float]:
    """The numbers in ``values`` (``None`` dropped)."""
    return [float(v) for v in values if isinstance(v, int | float)]
