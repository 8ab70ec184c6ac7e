"""A history rewrite recorded as a delta (``agentflow/_rewrite.py``): applied to the
history before it, it gives back the history after it, whatever the policy did — drop,
replace, insert, reorder, copy —, in as few items as the kept runs allow; a damaged one
is a ValueError saying which item, never an IndexError or a wrong history."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow._rewrite import apply_rewrite, rewrite_delta


def _history(n: int) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}"} for i in range(n)]


#: An edit a policy may make: (kind, position, length).
_edits = st.lists(
    st.tuples(
        st.sampled_from(["drop", "replace", "insert", "copy", "move"]),
        st.integers(0, 40),
        st.integers(1, 5),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 40), edits=_edits)
def test_applied_to_the_history_before_it_a_delta_gives_the_history_after_it(
    n: int, edits: list[tuple[str, int, int]]
) -> None:
    before = _history(n)
    after = list(before)
    for k, (kind, at, length) in enumerate(edits):
        at = min(at, len(after))
        if kind == "drop":
            del after[at : at + length]
        elif kind == "replace" and at < len(after):
            after[at] = {"role": "tool", "tool_call_id": "x", "content": f"cut {k}"}
        elif kind == "insert":
            after[at:at] = [{"role": "user", "content": f"summary {k}"}] * length
        elif kind == "copy" and at < len(after):
            after[at] = dict(after[at])  # equal, not the same object
        elif kind == "move" and after:
            after.append(after.pop(at % len(after)))
    delta = rewrite_delta(before, after)
    # Read back against a copy, as a store rebuilds it: equal messages, other objects.
    rebuilt = apply_rewrite(copy.deepcopy(delta_as_json(delta)), copy.deepcopy(before))
    assert rebuilt == after
    for x, y in itertools.pairwise(delta):  # two runs never adjoin: one would do
        assert not (isinstance(x, tuple) and isinstance(y, tuple) and x[1] == y[0])
    if all(kind == "drop" for kind, _, _ in edits):  # only runs of the history before
        assert all(isinstance(item, tuple) for item in delta)


def delta_as_json(delta: list[Any]) -> list[Any]:
    """A delta as the store's JSON gives it back: its pairs as lists."""
    return [list(item) if isinstance(item, tuple) else item for item in delta]


def test_a_dropped_round_is_two_ranges() -> None:
    before = _history(2_000)
    after = before[:2] + before[4:]
    assert rewrite_delta(before, after) == [(0, 2), (4, 2_000)]
    summary = {"role": "user", "content": "summary"}
    assert rewrite_delta(before, [*before[:2], summary, *before[500:]]) == [
        (0, 2),
        summary,
        (500, 2_000),
    ]
    assert rewrite_delta(before, list(before)) == [(0, 2_000)]
    assert rewrite_delta(before, []) == []
    assert rewrite_delta([], [summary]) == [summary]


def test_a_stored_list_of_messages_only_reads_as_before() -> None:
    """What stores of schema version 1 hold: the whole history, no ranges."""
    whole = _history(3)
    assert apply_rewrite(whole, _history(7)) == whole


@pytest.mark.parametrize(
    ("delta", "says"),
    [
        ({"role": "user"}, "not a list but dict"),
        (5, "not a list but int"),
        ([[0, 9]], r"item 0, range \[0, 9\], is not within the 4 messages"),
        ([[0, 1], [-1, 2]], r"item 1, range \[-1, 2\]"),
        ([[3, 2]], r"item 0, range \[3, 2\]"),
        ([[0, 1, 2]], "item 0 is neither a message nor a"),
        ([[0]], "item 0 is neither"),
        ([[0, 1.5]], "item 0 is neither"),
        ([[True, False]], "item 0 is neither"),
        (["text"], "item 0 is neither"),
        ([None], "item 0 is neither"),
    ],
)
def test_a_damaged_delta_says_which_item_and_why(delta: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        apply_rewrite(delta, _history(4))
