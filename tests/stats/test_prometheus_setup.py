"""Making a PrometheusExporter: what its constructor calls and what it checks."""

from __future__ import annotations

import re

import pytest

from agentflow import ConfigError, Fleet
from agentflow.stats import PrometheusExporter
from agentflow.testing import MockTransport, Reply
from tests.stats.test_prometheus import families, sample


def test_in_flight_is_not_called_until_a_scrape() -> None:
    """``in_flight=lambda: fleet.in_flight`` with the fleet made after the exporter (the
    fleet takes the exporter as a callback): making the exporter must not call it."""
    calls: list[int] = []

    def in_flight() -> float:
        calls.append(1)
        return fleet.in_flight

    prom = PrometheusExporter(in_flight=in_flight)  # raised NameError: no fleet yet
    assert calls == []
    fleet = Fleet(MockTransport(lambda request: Reply.text("hi")), callbacks=[prom])
    assert sample(families(prom.text()), "agentflow_requests_in_flight") == 0
    assert calls == [1]


@pytest.mark.parametrize("prefix", ["1x", "my-app", "", "a b", "ünï"])
def test_a_prefix_that_is_no_metric_name_is_refused(prefix: str) -> None:
    """prometheus_client rewrote such a prefix silently ("my-app" → "my_app_turns_total")."""
    with pytest.raises(ConfigError, match=re.escape(f"prefix={prefix!r}")):
        PrometheusExporter(prefix=prefix)


@pytest.mark.parametrize("prefix", ["myapp", "_x", "ns:app", "A1"])
def test_a_metric_name_prefix_names_every_metric(prefix: str) -> None:
    names = {s.name for f in families(PrometheusExporter(prefix=prefix).text()).values()
             for s in f.samples}  # fmt: skip
    assert f"{prefix}_turns_total" in names
    assert all(n.startswith(f"{prefix}_") for n in names)
