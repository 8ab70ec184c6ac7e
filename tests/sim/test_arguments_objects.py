"""Simulated arguments for objects beyond their named properties: a ``minProperties`` met
with keys ``additionalProperties``, ``patternProperties`` or ``propertyNames`` allow (the
common map-typed parameter), and the keys ``dependentRequired`` asks for."""

from __future__ import annotations

import json
import random
from typing import Annotated, Any

import pydantic
import pytest

from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.arguments import SchemaError, generate_value

jsonschema = pytest.importorskip("jsonschema")


class Deploy(pydantic.BaseModel):
    env: dict[str, str] = pydantic.Field(min_length=1)
    limits: dict[Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z]+$")], int] = (
        pydantic.Field(min_length=2)
    )


SCHEMAS: dict[str, dict[str, Any]] = {
    "map": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1},
    "map of three": {"type": "object", "additionalProperties": True, "minProperties": 3},
    "pattern keys": {
        "type": "object",
        "patternProperties": {"^x": {"type": "string"}},
        "additionalProperties": False,
        "minProperties": 2,
    },
    "anchored pattern keys": {
        "type": "object",
        "patternProperties": {"^env_[A-Z]{2,4}$": {"type": "integer", "minimum": 1}},
        "additionalProperties": False,
        "minProperties": 3,
    },
    "ignored pattern": {
        "type": "object",
        "patternProperties": {"^(?!_)[a-z_0-9]+$": {"type": "integer"}},
        "additionalProperties": False,
        "minProperties": 1,
    },
    "named keys": {
        "type": "object",
        "propertyNames": {"pattern": "^[a-z]{3}[0-9]$"},
        "additionalProperties": {"type": "boolean"},
        "minProperties": 2,
    },
    "some named": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "number"},
        "minProperties": 3,
    },
    "dependent": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
        "required": ["a"],
        "dependentRequired": {"a": ["b"], "b": ["c"]},
        "additionalProperties": False,
    },
    "pydantic": Deploy.model_json_schema(),
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", range(20))
def test_generated_objects_validate(name: str, seed: int) -> None:
    schema = SCHEMAS[name]
    value = generate_value(schema, random.Random(seed))
    jsonschema.validate(value, schema)
    assert value == generate_value(schema, random.Random(seed))  # deterministic


def test_a_map_parameter_in_a_simulated_tool_call() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "deploy",
                "parameters": {
                    "type": "object",
                    "properties": {"env": SCHEMAS["map"]},
                    "required": ["env"],
                },
            },
        }
    ]
    for seed in range(5):
        engine = Engine("cpu-tiny", seed=seed, textgen=TextGenConfig(tool_rounds=1))
        rid = engine.add_chat(
            [{"role": "user", "content": "go"}], tools=tools, tool_choice="required"
        )
        plan = engine.record(rid).plan
        assert plan is not None
        arguments = json.loads(plan.tool_calls[0].arguments)
        jsonschema.validate(arguments, tools[0]["function"]["parameters"])  # type: ignore[index]
        assert len(arguments["env"]) >= 1


def test_an_object_that_cannot_hold_enough_keys_is_a_schema_error() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
        "minProperties": 2,
    }
    with pytest.raises(SchemaError, match="minProperties 2"):
        generate_value(schema, random.Random(1))
