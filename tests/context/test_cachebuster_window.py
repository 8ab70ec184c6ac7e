"""The cache-buster diff's work is bounded by its window, however large the document: a JSON
object is decoded only within JSON_REACH characters of the difference, and every '{' decoded
(the object around the difference looked for included) counts against JSON_TRIES. Before, a
timestamp nested deep in a large JSON document had every enclosing object decoded whole, in
both texts, outside the budget (~700x the CPU of a diff that stays in its window)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow.context import CacheBusterCheck, CacheBusterWarning, _bustspans
from agentflow.context._bustspans import JSON_TRIES, MARGIN

# What one decode may be handed: the window around a one-character difference and the reach
# of a JSON object on either side of it (4 x MARGIN each way), with room to spare.
PER_DECODE = 10 * MARGIN


def bust(a: str, b: str) -> list[CacheBusterWarning]:
    check = CacheBusterCheck()
    convo = [{"role": "user", "content": "x"}]
    assert check.check("s1", "ag", [{"role": "system", "content": a}, *convo], []) == []
    return check.check("s2", "ag", [{"role": "system", "content": b}, *convo], [])


class CountingDecoder:
    """The module's JSON decoder, counting the characters each decode is handed."""

    def __init__(self, decoder: json.JSONDecoder) -> None:
        self.decoder = decoder
        self.handed: list[int] = []

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        self.handed.append(len(s) - idx)
        return self.decoder.raw_decode(s, idx)


@pytest.fixture
def decoder(monkeypatch: pytest.MonkeyPatch) -> CountingDecoder:
    counting = CountingDecoder(_bustspans._DECODER)
    monkeypatch.setattr(_bustspans, "_DECODER", counting)
    return counting


def nested(ts: str, depth: int = 30) -> str:
    inner: dict[str, Any] = {"t": ts}
    for _ in range(depth):
        inner = {"c": inner, "pad": list(range(1000))}
    return "State: " + json.dumps(inner) + " end"


def timestamp_first(ts: str) -> str:
    records = [{"id": i, "score": i * 0.5, "tags": [i, i + 1, i + 2]} for i in range(3000)]
    return "State: " + json.dumps({"updated": ts, "records": records}) + " end"


@pytest.mark.parametrize("document", [nested, timestamp_first])
def test_a_timestamp_deep_in_a_large_json_document_is_diffed_within_the_window(
    decoder: CountingDecoder, document: Any
) -> None:
    a, b = document("2024-05-01T12:00:00Z"), document("2024-05-01T12:00:05Z")
    assert len(a) > 50 * PER_DECODE
    [w] = bust(a, b)
    assert (w.kind, w.snippet) == ("timestamp", "2024-05-01T12:00:05Z")
    # JSON_TRIES '{' for the walk and as many looking for the object around the difference,
    # each decoded in both texts at most.
    assert len(decoder.handed) <= 4 * JSON_TRIES
    assert max(decoder.handed, default=0) <= PER_DECODE
    assert sum(decoder.handed) <= 4 * JSON_TRIES * PER_DECODE


def test_an_object_around_the_difference_is_found_within_reach() -> None:
    def state(note: str, keys: str) -> str:
        return "State: {" + f'"note": "{note}", ' + keys + "} end"

    # The object starts more than MARGIN before the difference: looked for, and decoded.
    note = "shared words " * 30
    [w] = bust(state(note, '"b": 1, "c": 2'), state(note, '"c": 2, "b": 1'))
    assert w.kind == "reordered_keys"
    assert w.snippet.startswith('{"note"')
    # Further back than the reach it is not (the work stays bounded): a real difference.
    far = "shared words " * 300
    assert bust(state(far, '"b": 1, "c": 2'), state(far, '"c": 2, "b": 1')) == []


def test_records_before_the_difference_do_not_use_up_the_walk(decoder: CountingDecoder) -> None:
    # A list of small records closing before the difference: each '{' in it was a try spent
    # looking for the object around the difference, none were left to decode the reordered
    # object right at it, and the bust went unreported.
    records = ", ".join(json.dumps({"id": i}) for i in range(60))

    def state(last: str) -> str:
        return f"State: [{records}, {last}] end"

    [w] = bust(state('{"x": 1, "y": 2}'), state('{"y": 2, "x": 1}'))
    assert (w.kind, w.snippet) == ("reordered_keys", '{"y": 2, "x": 1}')
    a = state('{"x": 1, "y": 2, "at": "2024-05-01T12:00:00"}')
    b = state('{"y": 2, "x": 1, "at": "2024-05-01T12:00:07"}')
    assert sorted(w.kind for w in bust(a, b)) == ["reordered_keys", "timestamp"]
    # An object around the difference behind such records is still found (they are skipped
    # whole, not a try each), and the work stays within the budget.
    head = ", ".join(json.dumps({"id": i}) for i in range(25))

    def outer(keys: str) -> str:
        return "State: {" + f'"records": [{head}], ' + keys + "} end"

    decoder.handed.clear()
    [w] = bust(outer('"b": 1, "c": 2'), outer('"c": 2, "b": 1'))
    assert w.kind == "reordered_keys"
    assert w.snippet.startswith('{"records"')
    assert len(decoder.handed) <= 4 * JSON_TRIES


def test_a_long_run_of_separators_is_scanned_once() -> None:
    """The last nonce form's look-aheads ran to the end of a run from every '_', '/' or
    '+' in it: one search of 50 KB of underscores took ~17 s of CPU (quadratic), on the
    event loop. Now it starts only where a run starts. A hang guard, not a timing: 200 KB
    of each takes a fraction of a second now, and would take minutes before."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # ``-c`` imports from its cwd first
    code = (
        "from agentflow.context._bustspans import _VOLATILE\n"
        "for text in ('_' * 200_000, '/' * 200_000, '+' * 200_000, 'some_words_' * 20_000):\n"
        "    assert _VOLATILE.search(text) is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=root)
