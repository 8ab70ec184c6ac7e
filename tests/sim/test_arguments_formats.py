"""Simulated arguments for a string ``format`` pydantic checks: a UUID of the version
``UUID1`` ... ``UUID8`` ask for, an ISO 8601 duration for a ``timedelta``, and formats
longer than the 24 characters a free string gets (a UUID, a URL)."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

import pydantic
import pytest

from agentflow.sim.arguments import generate_value

TYPES: dict[str, Any] = {
    "uuid": uuid.UUID,
    "uuid1": pydantic.UUID1,
    "uuid3": pydantic.UUID3,
    "uuid4": pydantic.UUID4,
    "uuid5": pydantic.UUID5,
    "uuid6": pydantic.UUID6,
    "uuid7": pydantic.UUID7,
    "uuid8": pydantic.UUID8,
    "duration": datetime.timedelta,
    "uri": pydantic.AnyUrl,
}


@pytest.mark.parametrize("fmt", list(TYPES))
def test_a_format_pydantic_checks_gets_a_value_it_takes(fmt: str) -> None:
    """A ``UUID4`` or ``timedelta`` parameter got random words, and every simulated call
    of its tool failed validation (a UUID was longer than a free string may be)."""
    adapter = pydantic.TypeAdapter(TYPES[fmt])
    schema = adapter.json_schema()
    assert schema.get("format") == fmt
    for seed in range(8):
        adapter.validate_python(generate_value(schema, random.Random(seed)))


def test_a_max_length_still_bounds_a_format() -> None:
    schema = {"type": "string", "format": "uuid", "maxLength": 10}
    for seed in range(8):
        assert len(generate_value(schema, random.Random(seed))) <= 10
