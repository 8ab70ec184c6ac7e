"""Which keys a simulated object argument holds besides the ``properties`` it picks.

Two JSON-schema rules can ask for more: ``dependentRequired`` (draft 7: ``dependencies``
with a list) makes keys required once another key is present, and ``minProperties`` may
ask for more keys than ``properties`` names — the common map-typed parameter
(``{"type": "object", "additionalProperties": {...}, "minProperties": 1}``) names none.
Extra keys are built from a ``patternProperties`` pattern (by
:func:`~agentflow.sim.pattern.pattern_string`, never by running it) and take that
pattern's schema; without one, and if ``additionalProperties`` allows, they are words (or
``propertyNames`` strings) and take the ``additionalProperties`` schema.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentflow.sim.pattern import pattern_string

__all__ = ["add_dependents", "extra_keys"]

_ATTEMPTS = 16  # draws beyond the keys needed, before giving up
_NAME_DEPTH = 8  # a propertyNames string is generated as a leaf


class _Gen(Protocol):
    rng: random.Random

    def value(self, schema: Any, depth: int) -> Any: ...

    def spend(self, n: int, what: str) -> None: ...


def add_dependents(schema: Mapping[str, Any], chosen: list[str], chosen_set: set[str]) -> None:
    """Add to ``chosen`` the keys ``dependentRequired`` (or ``dependencies`` lists) asks
    for with the keys chosen, and theirs in turn."""
    deps: dict[str, Any] = {}
    for key in ("dependencies", "dependentRequired"):
        table = schema.get(key)
        if isinstance(table, Mapping):
            deps.update({k: v for k, v in table.items() if isinstance(v, list)})
    i = 0
    while deps and i < len(chosen):
        for dep in deps.get(chosen[i], ()):
            if isinstance(dep, str) and dep not in chosen_set:
                chosen.append(dep)
                chosen_set.add(dep)
        i += 1


def extra_keys(
    gen: _Gen, schema: Mapping[str, Any], need: int, taken: set[str], words: Sequence[str]
) -> list[tuple[str, Any]]:
    """Up to ``need`` new keys (none in ``taken``), each with the schema of its value;
    fewer if the schema allows no more names.

    Raises:
        PatternError: a ``patternProperties`` pattern is no regular expression.
    """
    out: list[tuple[str, Any]] = []
    if need <= 0:
        return out
    patterns = schema.get("patternProperties")
    usable = [
        (p, sub)
        for p, sub in (patterns.items() if isinstance(patterns, Mapping) else ())
        if isinstance(p, str) and sub is not False
    ]
    additional = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for attempt in range(need + _ATTEMPTS):
        if len(out) >= need:
            break
        key: Any = None
        sub: Any = additional
        if usable:
            pattern, sub = usable[attempt % len(usable)]
            key = pattern_string(pattern, gen.rng, 1, None)
            if key in taken and "$" not in pattern and "\\Z" not in pattern:
                key = f"{key}_{attempt}"  # a pattern matches keys as a search: still a match
            if key is None:  # a lookaround or the like: the pattern is ignored, as for strings
                key = _word(gen, words, taken, attempt)
        if key is None and additional is not False:
            sub = additional
            if isinstance(names, Mapping):
                key = gen.value({"type": "string", **names}, _NAME_DEPTH)
            else:
                key = _word(gen, words, taken, attempt)
        if not isinstance(key, str) or key in taken:
            continue
        gen.spend(len(key), "the strings")
        taken.add(key)
        out.append((key, sub))
    return out


def _word(gen: _Gen, words: Sequence[str], taken: set[str], attempt: int) -> str:
    word = gen.rng.choice(words)
    return word if word not in taken else f"{word}_{attempt}"
