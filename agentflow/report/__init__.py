"""Reports people read: figures and an HTML page, a live terminal view, the server's view.

- :func:`write_report` / :func:`make_figures` — ``agentflow.report/2`` JSON reports in,
  figures (PNG) and one self-contained HTML page out (``agentflow report``; needs the
  ``report`` extra: matplotlib, imported only when drawing).
- :class:`LiveView` — a fleet callback drawing progress, throughput, the slowest and
  fastest agents, errors, retries and cache hits with rich, cheaply.
- :class:`ServerWatch`, :func:`server_section` — scrape the server's ``/metrics``
  (vLLM, SGLang, llama.cpp names) around a run and set its view beside the client's.
- :class:`LoopLagProbe` — how busy the client's own event loop is, so that a report can
  say when the client, not the server, was the bottleneck.

See ``docs/report.md``.
"""

from typing import TYPE_CHECKING, Any

from agentflow._public import publish as _publish
from agentflow.report._build import FIGURE_KEYS, make_figures, write_report
from agentflow.report._canvas import Figure
from agentflow.report._dialects import DIALECTS, Dialect
from agentflow.report._lag import LoopLagProbe
from agentflow.report._prom import HistogramData, MetricsSnapshot, parse_metrics
from agentflow.report._runs import Run, load_run
from agentflow.report._server import GaugeSample, server_section, server_section_schema
from agentflow.report._watch import ServerWatch, metrics_url, scrape

if TYPE_CHECKING:
    from agentflow.report._live import LiveView

__all__ = [
    "DIALECTS",
    "FIGURE_KEYS",
    "Dialect",
    "Figure",
    "GaugeSample",
    "HistogramData",
    "LiveView",
    "LoopLagProbe",
    "MetricsSnapshot",
    "Run",
    "ServerWatch",
    "load_run",
    "make_figures",
    "metrics_url",
    "parse_metrics",
    "scrape",
    "server_section",
    "server_section_schema",
    "write_report",
]


if not TYPE_CHECKING:
    # At run time only: checkers read the import above, so a misspelled name is an error.

    def __getattr__(name: str) -> Any:
        """:class:`LiveView` is imported when first asked for (``agentflow report`` does not
        need it); rich, the ``demo`` extra it draws with, only when a view is made — so
        ``from agentflow.report import *`` works without rich."""
        if name == "LiveView":
            from agentflow.report._live import LiveView

            _publish(__name__, ["LiveView"], {"LiveView": LiveView})
            return LiveView
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
