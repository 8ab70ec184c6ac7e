"""A string a JSON schema's ``pattern`` matches, built from the pattern — never by running it.

A tool's schema comes from the client, and so does its ``pattern``. Testing candidate
strings against it with :mod:`re` let a pattern such as ``^([a-z]+)+[0-9]$`` backtrack
for hours on the server's event loop (ReDoS). Serving engines do not run the pattern
either: guided decoding (xgrammar, outlines) compiles it into a grammar or an automaton and
only ever emits what it allows. So does this module, on a small scale: the pattern is
parsed (by :mod:`re`'s own parser, so the syntax accepted is :mod:`re`'s) and a string is
generated from the parse tree — each literal, class, alternative and repetition in turn —
in work bounded by the pattern's size and the characters produced.

Constructs whose match depends on what surrounds them — lookarounds, ``\\b``, conditionals,
atomic groups and possessive repeats — are not generated: :func:`pattern_string` returns
``None`` and the caller ignores the pattern. A pattern that is not a regular expression,
or whose shortest string exceeds :data:`~agentflow.sim.arguments.MAX_ARGUMENT_SIZE`, is
the request's fault (a :class:`PatternError`).
"""

from __future__ import annotations

import functools
import importlib
import random
import re
from typing import Any

__all__ = ["MAX_PATTERN_STEPS", "PatternError", "pattern_string"]

# re's parser, the one re.compile uses (private, hence imported by name: no stubs).
_sre: Any = importlib.import_module("re._parser")

#: The most steps (characters produced, repetitions begun) one string may take, over all
#: its attempts: a pattern that needs more (``a{100000}``, ``(?:){99999}``) is refused.
MAX_PATTERN_STEPS = 1 << 17
_ATTEMPTS = 8
_EXTRA = 3  # repetitions beyond a repeat's minimum, at most, before stretching to minLength
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"
#: Characters tried, in turn, for a negated class (``[^…]``, ``\\W``…).
_OTHERS = _LETTERS + _DIGITS + _LETTERS.upper() + " -_.,:;/+=@#~!?*()[]{}<>'\"\\|&%$^\n\t"


class PatternError(ValueError):
    """The pattern is no regular expression, or asks for more than the simulator makes."""


class _Unsupported(Exception):
    """A construct this generator does not make strings for."""


class _DeadEnd(Exception):
    """This attempt's choices cannot match (an anchor mid-string, say); another may."""


@functools.lru_cache(maxsize=256)
def _parse(pattern: str) -> Any:
    try:
        return _sre.parse(pattern)
    except re.error as exc:
        raise PatternError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
    except OverflowError:
        raise PatternError(f"pattern {pattern!r} repeats more than re allows") from None


def pattern_string(
    pattern: str, rng: random.Random, min_length: int = 0, max_length: int | None = None
) -> str | None:
    """A string ``pattern`` matches, of ``min_length`` to ``max_length`` characters when
    one of a few attempts finds such a string (else one that matches, whatever its length:
    the pattern comes first, as in guided decoding); ``None`` if the pattern uses a
    construct this module does not generate. Deterministic for ``rng``'s state.

    Raises:
        PatternError: ``pattern`` is not a regular expression, or its strings need more
            than :data:`MAX_PATTERN_STEPS` steps.
    """
    tree = _parse(pattern)
    gen = _Gen(rng, pattern)
    found: str | None = None
    for attempt in range(_ATTEMPTS):
        gen.reset(min_length, extra=_EXTRA if attempt < _ATTEMPTS - 1 else 0)
        try:
            gen.sequence(tree)
        except _Unsupported:
            return None
        except _DeadEnd:
            continue
        found = "".join(gen.out)
        if min_length <= len(found) and (max_length is None or len(found) <= max_length):
            return found
    return found


class _Gen:
    """One pattern's strings: :meth:`sequence` appends to :attr:`out`."""

    def __init__(self, rng: random.Random, pattern: str) -> None:
        self.rng = rng
        self.pattern = pattern
        self.steps = MAX_PATTERN_STEPS
        self.out: list[str] = []
        self.size = 0
        self.want = 0
        self.extra = _EXTRA
        self.ended = False
        self.groups: dict[int, str] = {}

    def reset(self, want: int, extra: int) -> None:
        self.out, self.size, self.want, self.extra = [], 0, want, extra
        self.ended = False
        self.groups = {}

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise PatternError(
                f"pattern {self.pattern!r} asks for more than the simulator generates "
                f"({MAX_PATTERN_STEPS} characters and repetitions)"
            )

    def emit(self, text: str) -> None:
        for _ in text:
            self.step()
        if text and self.ended:
            raise _DeadEnd  # characters after a `$`
        if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            raise _Unsupported  # a lone surrogate cannot be sent as UTF-8
        self.out.append(text)
        self.size += len(text)

    def sequence(self, items: Any) -> None:
        for op, av in items:
            self.item(op, av)

    def item(self, op: Any, av: Any) -> None:
        if op is _sre.LITERAL:
            self.emit(chr(av))
        elif op is _sre.NOT_LITERAL:
            self.emit(self.other([(_sre.LITERAL, av)]))
        elif op is _sre.ANY:
            self.emit(self.rng.choice(_LETTERS))
        elif op is _sre.IN:
            self.emit(self.member(av))
        elif op is _sre.BRANCH:
            self.sequence(self.rng.choice(av[1]))
        elif op is _sre.SUBPATTERN:
            group, _add, _del, items = av
            start = len(self.out)
            self.sequence(items)
            if group is not None:
                self.groups[group] = "".join(self.out[start:])
        elif op is _sre.MAX_REPEAT or op is _sre.MIN_REPEAT:
            self.repeat(*av)
        elif op is _sre.GROUPREF:
            if av not in self.groups:
                raise _DeadEnd  # a group that took no part: its reference cannot match
            self.emit(self.groups[av])
        elif op is _sre.AT:
            self.anchor(av)
        else:  # lookarounds, conditionals, atomic groups, possessive repeats
            raise _Unsupported

    def repeat(self, lo: int, hi: int, items: Any) -> None:
        n = lo + self.rng.randint(0, max(0, min(hi - lo, self.extra)))
        done = 0
        while done < n or (done < hi and self.size < self.want):
            before = self.size
            self.step()
            self.sequence(items)
            done += 1
            if done >= n and self.size == before:
                break  # stretching to minLength, but this repetition adds nothing

    def anchor(self, at: Any) -> None:
        if at is _sre.AT_BEGINNING or at is _sre.AT_BEGINNING_STRING:
            if self.size:
                raise _DeadEnd
        elif at is _sre.AT_END or at is _sre.AT_END_STRING:
            self.ended = True
        else:  # \b, \B
            raise _Unsupported

    def member(self, items: Any) -> str:
        """A character of the class ``items`` (``[...]``, ``\\d``…)."""
        if items and items[0][0] is _sre.NEGATE:
            return self.other(items[1:])
        op, av = self.rng.choice(items)
        if op is _sre.LITERAL:
            return chr(av)
        if op is _sre.RANGE:
            return chr(self.rng.randint(*av))
        if op is _sre.CATEGORY:
            pool = _CATEGORY_POOLS.get(av)
            if pool is None:
                raise _Unsupported
            if pool:
                return self.rng.choice(pool)
            return self.other([(op, _CATEGORY_NOT.get(av))])
        raise _Unsupported

    def other(self, items: Any) -> str:
        """A character outside the class ``items`` (in either case)."""
        start = self.rng.randrange(len(_OTHERS))
        for c in _OTHERS[start:] + _OTHERS[:start]:
            if not any(_in(ch, items) for ch in {c, c.lower(), c.upper()}):
                return c
        raise _DeadEnd


def _in(c: str, items: Any) -> bool:
    """Whether ``c`` is in the (positive) class ``items``; unsure counts as in."""
    for op, av in items:
        if op is _sre.LITERAL:
            hit = ord(c) == av
        elif op is _sre.RANGE:
            hit = av[0] <= ord(c) <= av[1]
        elif op is _sre.CATEGORY and av in _CATEGORY_TEST:
            hit = _CATEGORY_TEST[av](c)
        else:
            hit = True
        if hit:
            return True
    return False


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


#: What each class escape is made from ("": a character outside its opposite).
_CATEGORY_POOLS: dict[Any, str] = {
    _sre.CATEGORY_DIGIT: _DIGITS,
    _sre.CATEGORY_WORD: _LETTERS + _DIGITS + "_",
    _sre.CATEGORY_SPACE: " ",
    _sre.CATEGORY_NOT_DIGIT: "",
    _sre.CATEGORY_NOT_WORD: "",
    _sre.CATEGORY_NOT_SPACE: "",
}
_CATEGORY_NOT: dict[Any, Any] = {
    _sre.CATEGORY_NOT_DIGIT: _sre.CATEGORY_DIGIT,
    _sre.CATEGORY_NOT_WORD: _sre.CATEGORY_WORD,
    _sre.CATEGORY_NOT_SPACE: _sre.CATEGORY_SPACE,
}
_CATEGORY_TEST: dict[Any, Any] = {
    _sre.CATEGORY_DIGIT: str.isdecimal,
    _sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdecimal(),
    _sre.CATEGORY_WORD: _word,
    _sre.CATEGORY_NOT_WORD: lambda c: not _word(c),
    _sre.CATEGORY_SPACE: str.isspace,
    _sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
}
