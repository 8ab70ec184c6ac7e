"""A seeded mixed-content workload: agent-like sessions whose observations are prose, code,
log lines and JSON of varied sizes — the content on which tokenizers disagree most."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

_WORDS = (
    "the committee met to review budget and agreed wait for more figures because however "
    "system network latency request client server would could should before after during "
    "deployment configuration throughput measured users reported"
).split()


def prose(rng: random.Random, n: int) -> str:
    """``n`` sentences of plain English."""
    return " ".join(
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
        for _ in range(n)
    )


def code(rng: random.Random, n: int) -> str:
    """A fenced Python block of ``n`` small functions."""
    out = []
    for i in range(n):
        var = f"{rng.choice(['rows', 'items', 'batch', 'queue'])}_{rng.randint(0, 99)}"
        name = rng.choice(["total", "score", "merge", "flush"])
        attr = rng.choice(["score", "total", "n"])
        out.append(
            f"def {name}_{i}({var}, limit={rng.randint(1, 500)}):\n"
            f"    return sum(x.{attr} * {rng.randint(1, 9)} "
            f"for x in {var}[:limit] if x.get('ok'))\n"
        )
    return "```python\n" + "".join(out) + "```"


def logs(rng: random.Random, n: int) -> str:
    """``n`` timestamped log lines (digits: SmolLM2 spells each one)."""
    return "".join(
        f"2024-05-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}Z {rng.choice(['INFO', 'WARN', 'ERROR'])} "
        f"worker-{rng.randint(0, 99)} req={rng.getrandbits(32):08x} "
        f"latency_ms={rng.randint(1, 999)} path=/api/v1/items/{rng.randint(1, 9999)}\n"
        for _ in range(n)
    )


def rows_json(rng: random.Random, n: int) -> str:
    """A JSON document of ``n`` rows."""
    return json.dumps(
        {
            "rows": [
                {
                    "id": rng.randint(1, 10**6),
                    "name": f"user{rng.randint(0, 999)}",
                    "score": round(rng.random() * 100, 3),
                    "ok": rng.random() < 0.5,
                }
                for _ in range(n)
            ]
        }
    )


#: The generators, by the kind :func:`agentflow.context.content_kind` should find.
KINDS: dict[str, Callable[[random.Random, int], str]] = {
    "prose": prose,
    "code": code,
    "log": logs,
    "json": rows_json,
}

#: ~600 tokens of shared instructions, as agents carry.
INSTRUCTIONS = "You are a careful assistant for a software team. " + " ".join(
    f"Rule {i}: keep answers short, cite file names, and never invent APIs." for i in range(45)
)


def observation(rng: random.Random, max_units: int) -> tuple[str, str]:
    """A random kind and a text of it, 1 to ``max_units`` units long."""
    kind = rng.choice(list(KINDS))
    return kind, KINDS[kind](rng, rng.randint(1, max_units))


def first_messages(rng: random.Random, session: int, max_units: int) -> list[dict[str, Any]]:
    """A session's opening: instructions (every fourth session has none: the template then
    adds its own default system prompt) and a task with a first observation."""
    msgs: list[dict[str, Any]] = []
    if session % 4 != 3:
        msgs.append({"role": "system", "content": INSTRUCTIONS})
    _, text = observation(rng, max_units)
    msgs.append({"role": "user", "content": f"Task {session}:\n{text}"})
    return msgs


def next_messages(rng: random.Random, max_units: int) -> list[dict[str, Any]]:
    """One or two observations, as tool results come back."""
    return [
        {"role": "user", "content": observation(rng, max_units)[1]}
        for _ in range(rng.choice((1, 1, 2)))
    ]
