"""``TiktokenCounter.head_split``: where a head of a text splits into parts that tiktoken
tokenizes alone, found in the one tokenization ``head_length`` makes — and what
``SessionEstimates.cut`` and ``TiktokenCounter.encode`` build on it. Checked against
tiktoken's own counts on random mixed text (words, digits, punctuation, contractions,
every kind of whitespace, accents, CJK, emoji), for both shipped encodings.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from agentflow.context import MessageCounter, TiktokenCounter
from agentflow.context._calibration import Calibrator
from agentflow.context._encodings import encoding
from agentflow.context._estimates import SessionEstimates

ENCODINGS = ["cl100k_base", "o200k_base"]

_PIECES = [
    *"the quick brown fox jumps over lazy dogs Token Counter HTTP JSONDecodeError".split(),
    *"0 7 42 123 2024 99999 3.14 1,000".split(),
    *". , ; : ! ? ... !? ( ) [ ] { } \" ' - -- => :: # @ / \\ ` ``` */".split(),
    "'s", "'ll", "'RE", "n't", "’s",
    " ", " ", " ", "  ", "   ", "\n", "\n\n", " \n", "\n ", "\t", "\r\n", "\u00a0", "\u3000",
    "é", "über", "naïve", "e\u0301", "数据库", "连接", "🙂", "🚀🚀", "👩‍💻", "ß", "Ωmega",
]  # fmt: skip


def mixed_text(rng: random.Random, pieces: int) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(pieces))


def prose(rng: random.Random, words: int) -> str:
    vocab = ["alpha", "beta", "kappa", "re", "tokenizer", "x", "of", "the", "cut,", "end."]
    return " ".join(rng.choice(vocab) for _ in range(words))


def texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    out = [mixed_text(rng, rng.randint(20, 600)) for _ in range(60)]
    out += [prose(rng, rng.randint(50, 400)) for _ in range(10)]
    out += ["word " * 400, "x" * 3_000, " " * 500 + "a b", "a" + " " * 700]
    return out


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_split_counts_every_longer_head_exactly(name: str) -> None:
    """For every head ``text[:x]`` with ``x ≥ b``: ``k`` + the count of ``text[b:x]``
    is tiktoken's count of the head (checked at ``b``, around ``at`` and beyond)."""
    counter = TiktokenCounter(name)
    true = encoding(name).encode_ordinary
    splits = 0
    for i, text in enumerate(texts(seed=len(name))):
        for n in (1, 5, 37, 120):
            at, b, k = counter.head_split(text, n)
            if (b, k) == (0, 0):
                continue
            splits += 1
            assert 0 < b < at < len(text)
            assert text[b] == " " and not text[b - 1].isspace()
            for x in {b, b + 1, at - 1, at, at + 1, (at + len(text)) // 2, len(text)}:
                x = min(max(x, b), len(text))
                assert len(true(text[:x])) == k + len(true(text[b:x])), (i, n, x)
    assert splits > 100  # most heads of mixed text have such a space close before the cut


@pytest.mark.parametrize("name", ENCODINGS)
def test_encode_reuses_the_split_head_exactly(name: str) -> None:
    """After a split, a text that starts with the head before the split and a space is
    tokenized from the space on only — into the very ids tiktoken gives the whole."""
    true = encoding(name).encode_ordinary
    rng = random.Random(7)
    reused = 0
    for text in texts(seed=3):
        counter = TiktokenCounter(name)
        raw = counter._encode
        handed: list[str] = []

        def spy(
            t: str, raw: Callable[[str], list[int]] = raw, seen: list[str] = handed
        ) -> list[int]:
            seen.append(t)
            return raw(t)

        counter._encode = spy  # type: ignore[assignment]
        at, b, _ = counter.head_split(text, 50)
        handed.clear()
        for tail in ("\n[… 1,234 tokens of tool output cut …]", "", "x", rng.choice(_PIECES)):
            candidate = text[:at] + tail
            assert counter.encode(candidate) == true(candidate)
            assert counter.count(candidate) == len(true(candidate))
        assert counter.encode(text) == true(text)
        if b:
            reused += 1
            # The head before the split was never handed to tiktoken again.
            assert all(not t.startswith(text[:b]) for t in handed)
    assert reused > 40


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("slope", [1.0, 0.8, 1.3])
def test_cut_with_the_split_keeps_its_promise(name: str, slope: float) -> None:
    """``SessionEstimates.cut`` with the split: a head that fits while one character
    more does not, by tiktoken's own counts (``tests/context/test_head_length.py``
    checks it against the search on texts whose counts grow with their length; mixed
    text, and even prose, is not monotonic — ``kap`` may take more tokens than
    ``kappa`` — so there more than one head may keep the promise)."""
    true = encoding(name).encode_ordinary
    rng = random.Random(13)
    for text in [*texts(seed=11)[::3], *(prose(rng, 600) for _ in range(6))]:
        for n in (3, 64, 200):
            split = _estimates(TiktokenCounter(name), slope)
            head = split.cut(text, n)
            assert text.startswith(head)
            assert split._last == (head, len(true(head)))  # the count it keeps is exact
            assert split.text(head) <= n
            if head != text:
                assert split.text(text[: len(head) + 1]) > n


def test_cutting_prose_tokenizes_a_head_and_a_few_characters() -> None:
    """On prose, the guess's tokenization is the only long one: the two confirming
    counts (the head fits, one character more does not) tokenize a few characters."""
    text = prose(random.Random(5), 3_000)
    counter = TiktokenCounter()
    raw = counter._encode
    handed: list[str] = []

    def spy(t: str) -> list[int]:
        handed.append(t)
        return raw(t)

    counter._encode = spy  # type: ignore[assignment]
    est = _estimates(counter, 1.0)
    head = est.cut(text, 512)
    assert len(raw(head)) == 512 and len(raw(text[: len(head) + 1])) > 512
    long, short = [t for t in handed if len(t) > 100], [t for t in handed if len(t) <= 100]
    assert len(long) == 1 and len(long[0]) <= 5 * 512 + 16  # the guess's head
    assert len(short) == 2 and sum(map(len, short)) < 2 * 64  # after the split
    handed.clear()
    assert est.text(head) == 512 and handed == []


class _Plain:
    """tiktoken without ``head_length`` or ``head_split``: the search alone."""

    def __init__(self, name: str) -> None:
        self._encode = encoding(name).encode_ordinary
        self.name = f"plain:{name}"

    def count(self, text: str) -> int:
        return len(self._encode(text))

    def encode(self, text: str) -> list[int]:
        return self._encode(text)


def _estimates(counter: object, slope: float) -> SessionEstimates:
    calibrator = Calibrator()
    for raw in (1_000, 2_000, 4_000, 8_000):
        calibrator.observe("m", raw, round(raw * slope))
    return SessionEstimates(MessageCounter(counter), calibrator, "m")  # type: ignore[arg-type]
