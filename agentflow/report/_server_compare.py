"""The server's figures beside the client's, for the report's ``server`` section
(``report/_server.py``): llama.cpp's decode speed from its counters, and the comparison
table — each latency's distribution and each count on both sides, with their ratio."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["comparison", "decode_tps"]

_LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_s")


def decode_tps(
    counters: Mapping[str, float | None], client: Mapping[str, Any] | None
) -> float | None:
    """The server's decode speed over every request, from the seconds it spent predicting
    (llama.cpp): (tokens predicted − requests) / seconds predicting.

    llama.cpp times a request's prediction from its first token to its last (its
    ``timings.predicted_ms``, the client's E2E − TTFT), so the first token took none of
    those seconds: its own ``predicted_per_second`` is (predicted_n − 1) / predicted_ms,
    and tokens / seconds would be n / (n − 1) too fast. The requests are the server's own
    count where it exports one, else the client's turns plus its context policies'
    compaction requests (``fleet.compaction.requests``), which finish on the same server:
    llama.cpp adds a request to its counters only when it finishes, never an attempt that
    was cut off (a retried one). Requests from other clients in the window are not in the
    client's count, so they bias the figure up. ``None`` without a count of requests (no
    client report) or without those seconds."""
    gen, gen_s = counters.get("generation_tokens"), counters.get("generation_seconds")
    if gen is None or not gen_s:
        return None
    requests = counters.get("requests")
    if requests is None and client is not None:
        fleet = client.get("fleet") or {}
        requests = fleet.get("turns")
        if isinstance(requests, int | float):
            requests += _summary_requests(fleet)
    if not isinstance(requests, int | float) or requests > gen:
        return None
    return (gen - requests) / gen_s


def _client_requests(fleet: dict[str, Any]) -> int | None:
    """The requests the client sent the server: its turns, its retried attempts and its
    context policies' summary requests (``fleet.compaction``, ``null`` when not seen)."""
    turns = fleet.get("turns")
    if turns is None:
        return None
    return int(turns + (fleet.get("retries") or 0) + _summary_requests(fleet))


def _summary_requests(fleet: Mapping[str, Any]) -> int | float:
    """The client's context policies' summary requests (``fleet.compaction.requests``),
    0 when the report did not see them (``null``) or predates them."""
    requests = (fleet.get("compaction") or {}).get("requests")
    return requests if isinstance(requests, int | float) else 0


def _client_decode_tps(client: Mapping[str, Any]) -> float | None:
    """The client's decode speed over every turn, token-weighted: Σ decode tokens /
    Σ (E2E − TTFT), put together from each agent's (``agents[].decode_tps.mean`` is its
    own Σ / Σ). An agent's decode tokens are taken as its output tokens less one a turn:
    exact but for turns without a TPOT (no output, or all of it in one read) and reasoning
    the server never streamed."""
    tokens = seconds = 0.0
    for row in client.get("agents") or ():
        tps = (row.get("decode_tps") or {}).get("mean")
        out, turns = row.get("output_tokens"), row.get("turns")
        if not isinstance(tps, int | float) or tps <= 0:
            continue
        if not isinstance(out, int | float) or not isinstance(turns, int | float):
            continue
        decoded = out - turns
        if decoded > 0:
            tokens += decoded
            seconds += decoded / tps
    return tokens / seconds if seconds > 0 else None


_COMPARE_NOTES = {
    "ttft_s": "server: arrival → first token made; client: request sent → first output chunk "
    "read (adds the network and the server's HTTP handling)",
    "itl_s": "client: per chunk; server: per token (equal at one token per chunk)",
    "tpot_s": "(last − first token) / (tokens − 1) per request on both sides",
    "e2e_s": "server: arrival → finish; client: request sent → end of stream",
}


def comparison(section: Mapping[str, Any], client: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The table of each client figure beside the server's (``section``, the server
    section so far; ``client``, the client's report), with their ratio."""
    rows: list[dict[str, Any]] = []
    dists = client.get("distributions", {})
    fleet = client.get("fleet", {})
    for key in _LATENCIES:
        srv, cli = section["latency"].get(key), dists.get(key)
        if srv is None or cli is None:
            continue
        pick = ("count", "mean", "p50", "p90", "p99")
        c = {k: cli.get(k) for k in pick}
        s = {k: srv.get(k) for k in pick}
        rows.append(
            {
                "figure": key,
                "unit": "s",
                "client": c,
                "server": s,
                "ratio": _ratio(s["mean"], c["mean"]),
                "note": _COMPARE_NOTES[key],
            }
        )
    counters = section["counters"]
    for figure, cval, sval, note in (
        ("output_tokens", fleet.get("output_tokens"), counters.get("generation_tokens"), ""),
        (
            "prompt_tokens",
            fleet.get("prompt_tokens"),
            counters.get("prompt_tokens"),
            "the server counts every request it admitted, including retried ones",
        ),
        ("cached_tokens", fleet.get("cached_tokens"), counters.get("cache_hits"), ""),
        (
            "cache_hit_rate",
            fleet.get("cache_hit_rate"),
            section["cache_hit_rate"],
            "client: cached / prompt tokens as reported in usage",
        ),
        (
            "requests",
            _client_requests(fleet),
            counters.get("requests"),
            "client: turns + retried attempts + context policies' summary requests; "
            "server: requests finished",
        ),
        (
            "decode_tps",
            _client_decode_tps(client),
            section["decode_tps"],
            "token-weighted on both sides; client: Σ decode tokens / Σ(E2E − TTFT) over "
            "turns; server: (tokens predicted − requests) / seconds predicting",
        ),
    ):
        if sval is None:
            continue
        rows.append(
            {
                "figure": figure,
                "unit": "",
                "client": cval,
                "server": sval,
                "ratio": _ratio(sval, cval),
                "note": note,
            }
        )
    return rows


def _ratio(server: Any, client: Any) -> float | None:
    if not isinstance(server, int | float) or not isinstance(client, int | float) or not client:
        return None
    return float(server) / float(client)
