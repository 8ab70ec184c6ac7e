"""Whether a resumed attempt's session ended elsewhere since the attempt started: the
attempt its end was stamped with counts only where both the start's snapshot and the row
now have one. A store that connected before ``sessions.ended_attempt`` existed snapshots
``None``; once a reconnect finds the column (added by another worker) the row has a stamp,
and a session that had ended before this attempt was returned as stored, not re-run."""

from __future__ import annotations

import pytest

from agentflow.store._claims import ended_since


@pytest.mark.parametrize(
    ("started", "now", "ended"),
    [
        (("error", 3, None), ("error", 3, 2), False),  # a column only now: as before
        (("error", 3, -1), ("error", 3, 2), True),  # ended before the column, re-run since
        (("error", 3, -1), ("error", 3, -1), False),
        (("error", 3, 1), ("error", 3, None), False),
        (("error", 3, None), ("error", 3, None), False),
        (("error", 3, 1), ("error", 3, 1), False),
        (("error", 3, 1), ("error", 3, 2), True),  # re-run elsewhere, ended the same way
        (("error", 3, None), ("error", 4, 2), True),
        (("pending", 3, None), ("completed", 3, 2), True),
        (None, ("completed", 3, None), True),  # not in the store as the attempt started
    ],
)
def test_the_stamp_counts_only_when_both_have_one(
    started: tuple[str, int, int | None] | None, now: tuple[str, int, int | None], ended: bool
) -> None:
    assert ended_since(started, now) is ended
