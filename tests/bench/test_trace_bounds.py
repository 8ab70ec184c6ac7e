"""A trace's synthetic system prompts stay bounded: a prompt of ``prefix_blocks`` is at most
``MAX_TOKENS`` tokens (blocks × ``block_tokens``; its bad lines are in ``test_trace.py``),
and the cache of block texts is bounded in characters, not in blocks."""

from __future__ import annotations

import json
import sys

import pytest

from agentflow.bench import _script, read_trace, trace_scripts
from agentflow.bench._workload_spec import MAX_TOKENS


def _lines(*objs: dict[str, object]) -> list[str]:
    return [json.dumps(o) for o in objs]


def test_prefix_blocks_up_to_the_bound_are_taken() -> None:
    """A system prompt of exactly MAX_TOKENS in blocks is read (the bound is on the
    product, inclusive); its text is made only when a session starts."""
    line = {"session_id": "a", "timestamp": 0, "text": "x", "prefix_blocks": [1] * 10,
            "block_tokens": MAX_TOKENS // 10}  # fmt: skip
    (script,) = trace_scripts(read_trace(_lines(line)))
    assert len(script.prefix_blocks) * script.block_tokens == MAX_TOKENS


def test_the_block_text_cache_is_bounded_in_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks' texts are cached by characters, not by count: 4,096 blocks of a trace's
    millions of tokens each would hold gigabytes. A block too large for the cache is made
    each time; the cache keeps the most recent blocks within its budget."""
    big = _script._block_text(1, 2_000_000)  # ~10 M characters
    assert sys.getrefcount(big) == 2  # ours and getrefcount's: the cache keeps none
    assert len(big) > _script._BLOCK_CACHE_CHARS // 4  # (over a quarter of the cache)
    monkeypatch.setattr(_script, "_BLOCK_CACHE_CHARS", 20_000)
    texts = [_script._block_text(b, 512) for b in range(100)]  # ~2,800 characters each
    # A text only the list holds: the list's reference, the loop's and getrefcount's.
    kept = [sys.getrefcount(t) > 3 for t in texts]
    cached = sum(kept)
    assert 3 <= cached < 10  # the latest few, within 20,000 characters
    assert kept[-cached:] == [True] * cached
    assert [_script._block_text(b, 512) for b in range(100)] == texts  # the same text
