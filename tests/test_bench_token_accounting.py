"""``benchmarks/token_accounting.py``'s per-turn rows at a tiny size: each turn goes through
the documented chain ``[ContextBudget(...), PrefixIndex()]`` as a session runs it, and its
figures are complete. Nothing here asserts a speed (that is the benchmark's to measure, in
``docs/benchmarks.md``).

The rows used to time ``PromptCounter.count`` and ``PrefixSession.observe`` on the
benchmark's own message objects, which hid what a session's budget does with the replies
it appends (every past reply compared by value on each turn).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentflow.context import SessionBudget

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmarks are scripts, not a package
import token_accounting  # noqa: E402

REPS = 4


def test_the_rows_time_the_budgets_turns() -> None:
    """Every row is a bound budget whose histories were built turn by turn; each timed
    turn appended an output and the session's own reply, timed both calls, tokenized each
    text once, and left the budget's counter holding the session's messages (the newest
    reply, counted as the tracker's copy, is taken at the next count)."""
    res = token_accounting.run([2_000, 6_000], REPS, 1)
    assert [r.target for r in res.rows] == [2_000, 6_000]
    for row in res.rows:
        assert isinstance(row.ctx, SessionBudget)
        assert row.start_tokens >= row.target
        assert row.turns > REPS  # the history was built through the chain
        assert len(row.messages) == row.start_messages + 2 * REPS
        assert len(row.cpu) == len(row.before_cpu) == len(row.after_cpu) == REPS
        assert [round(p, 2) for p in row.passes] == [1.0] * REPS
        counter = row.ctx._est.counter
        held = [m for m in row.messages[:-1] if counter.count_of(m) is None]
        assert held == []
