"""Making a PrometheusExporter: what its constructor calls and what it checks."""

from __future__ import annotations

from agentflow import Fleet
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
