"""``head_length``: where a text's first N tokens end, from one tokenization of a head.

``SessionEstimates.cut`` (what ``TruncateToolOutputs`` cuts with) starts there when the
counter offers it, and must find the same longest head as its search without it.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from agentflow.context import HFTokenizerCounter, MessageCounter, TiktokenCounter, TokenCounter
from agentflow.context._calibration import Calibrator
from agentflow.context._estimates import SessionEstimates

from .hf_tokenizer import CORPUS

#: One long run: far more than ~5 characters a token, and not monotonic in its length.
RUN = "x" * 20_000
TEXTS = [
    "\n".join(f"line {i}: value={(i * 7919) % 10007} ok" for i in range(300)),
    "word " * 3_000,
    "数据库连接池配置错误。" * 400,  # about a token a character
    "🙂🚀" * 800,  # several tokens a character: ends fall inside characters
    RUN,
    "short text",
    "",
]
SIZES = [1, 7, 100, 512]


class Recording:
    """A :class:`TokenCounter` around tiktoken that records every text it tokenizes, and
    offers ``head_length`` only when asked to."""

    def __init__(self, *, heads: bool) -> None:
        self.inner = TiktokenCounter()
        self.texts: list[str] = []
        inner_encode = self.inner._encode

        def encode(text: str) -> list[int]:
            self.texts.append(text)
            return inner_encode(text)

        self.inner._encode = encode  # head_length tokenizes through it too
        if heads:
            self.head_length = self.inner.head_length

    @property
    def name(self) -> str:
        return self.inner.name

    def count(self, text: str) -> int:
        return self.inner.count(text)

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)


def estimates(counter: TokenCounter, slope: float = 1.0) -> SessionEstimates:
    calibrator = Calibrator()
    for raw in (1_000, 2_000, 4_000, 8_000):  # teach it a slope (no offset)
        calibrator.observe("m", raw, round(raw * slope))
    assert calibrator.slope("m") == pytest.approx(slope, rel=1e-3)
    return SessionEstimates(MessageCounter(counter), calibrator, "m")


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("n", SIZES)
def test_tiktoken_head_length_ends_the_first_n_tokens(text: str, n: int) -> None:
    counter = TiktokenCounter()
    at = counter.head_length(text, n)
    total = counter.count(text)
    if total <= n:
        assert at == len(text)
        return
    assert 0 <= at < len(text)
    # The first n tokens' text, whole characters only: a token that ends inside a
    # character (an emoji is several) leaves that character out.
    assert n - 3 <= counter.count(text[:at]) <= n


def test_head_length_tokenizes_only_a_head() -> None:
    rec = Recording(heads=True)
    text = TEXTS[0] * 40  # ~120k tokens
    at = rec.inner.head_length(text, 100)
    # One head of ~5 characters a token (516 characters), not the text.
    assert [len(t) for t in rec.texts] == [516]
    assert rec.inner.count(text[:at]) == 100
    rec.texts.clear()
    rec.inner.head_length("x" * 200_000, 100)  # a long run: the head doubles until over
    assert max(map(len, rec.texts)) < 20 * 516 and len(rec.texts) <= 6


def test_the_next_head_is_sized_from_the_last_cut() -> None:
    """Outputs of one session are alike: after one cut, the next head tokenized is about
    as long as the cut (15% to spare), not 5 characters a token."""
    rec = Recording(heads=True)
    first = rec.inner.head_length(TEXTS[0], 512)
    rec.texts.clear()
    at = rec.inner.head_length(TEXTS[0][7:], 512)  # another output of the same kind
    assert [len(t) for t in rec.texts] == [int(1.15 * first) + 16]
    assert rec.inner.count(TEXTS[0][7:][:at]) == 512
    rec.texts.clear()
    # A text of longer tokens after it: the head is too short at first and doubles.
    sparse = TEXTS[1]  # "word " × 3,000: 5 characters a token
    at = rec.inner.head_length(sparse, 512)
    assert len(rec.texts) == 2 and rec.inner.count(sparse[:at]) == 512


@pytest.mark.parametrize("slope", [1.0, 0.8, 1.3])
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("n", SIZES)
def test_cut_from_the_guess_equals_the_search(text: str, n: int, slope: float) -> None:
    guided = estimates(Recording(heads=True), slope)
    searched = estimates(Recording(heads=False), slope)
    head = guided.cut(text, n)
    assert text.startswith(head) and guided.text(head) <= n
    if head != text:
        assert guided.text(text[: len(head) + 1]) > n
    if text != RUN:
        assert head == searched.cut(text, n)


def test_a_run_of_one_character_is_not_monotonic() -> None:
    """Why the search and the guess may stop at different heads of :data:`RUN`: a longer
    run can take fewer tokens, so more than one head fits with one character more over."""
    count = TiktokenCounter().count
    counts = [count(RUN[:k]) for k in range(1, 200)]
    assert any(b < a for a, b in itertools.pairwise(counts))


def test_cut_from_the_guess_costs_three_short_counts() -> None:
    """On ordinary text: the guess, the head, the head and one character more."""
    text = TEXTS[0] * 20
    rec = Recording(heads=True)
    head = estimates(rec).cut(text, 512)
    assert len(rec.texts) == 3 and max(map(len, rec.texts)) <= 5 * 512 + 16
    assert rec.inner.count(head) == 512
    plain = Recording(heads=False)
    assert estimates(plain).cut(text, 512) == head
    assert len(plain.texts) > 3  # the search alone needs more


def test_the_head_is_counted_once_for_cut_and_text() -> None:
    rec = Recording(heads=True)
    est = estimates(rec)
    head = est.cut(TEXTS[0], 100)
    rec.texts.clear()
    assert est.text(head) == 100  # what a policy asks next: no new tokenization
    assert rec.texts == []


def test_hf_head_length_leaves_out_a_character_the_nth_token_ends_inside(
    byte_level_json: Path,
) -> None:
    """A byte-level tokenizer's tokens of one character's bytes share its offsets: the
    head ended after the character whose first byte was the n-th token, so it held more
    than n tokens (95 of 300 random texts)."""
    counter = HFTokenizerCounter.from_file(byte_level_json)
    rng = random.Random(3)
    pieces = ["中", "😀", "é", "a", " the", " fox", "👍🏽", "\n"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(3, 60)))
        n = rng.randrange(1, 20)
        at = counter.head_length(text, n)
        if counter.count(text) <= n:
            assert at == len(text)
            continue
        assert counter.count(text[:at]) <= n, (text, n, at)
        # Only the character the n-th token ends inside is left out, no more.
        assert counter.count(text[: at + 1]) > n, (text, n, at)
    # 👍 (4 bytes) is 3 tokens of this tokenizer: a head ending in any of them leaves it out.
    assert counter.count("👍") == 3 and counter.count("a👍b") == 5
    assert [counter.head_length("a👍b", n) for n in range(1, 6)] == [1, 1, 1, 2, 3]


@pytest.mark.parametrize("n", SIZES)
def test_hf_head_length(tokenizer_json: Path, n: int) -> None:
    counter = HFTokenizerCounter.from_file(tokenizer_json)
    assert isinstance(counter, TokenCounter)
    for text in [" ".join(CORPUS), "the fox counts tokens", "🙂 unknown ünïcode " * 50, ""]:
        at = counter.head_length(text, n)
        if counter.count(text) <= n:
            assert at == len(text)
            continue
        assert counter.count(text[:at]) == n
        guided = estimates(counter)
        head = guided.cut(text, n)
        assert head == text[:at] or guided.text(head) <= n
        assert guided.text(text[: len(head) + 1]) > n
