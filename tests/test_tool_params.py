"""What a tool's parameters become in its schema: ``Annotated`` hints, names, defaults."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypedDict

import pydantic
import pytest
import typing_extensions

from agentflow import Agent, ConfigError, Tool, ToolError, tool
from tests.toolcall import one_call


def _count(n: Annotated[int, pydantic.Field(ge=1, description="how many, at least 1")]) -> str:
    """Count."""
    return f"ran with n={n}"


def _documented(n: Annotated[int, pydantic.Field(ge=1, description="from the hint")] = 2) -> int:
    """Count.

    Args:
        n: from the docstring.
    """
    return n


def _undocumented(n: Annotated[int, pydantic.Field(ge=1, description="from the hint")] = 2) -> int:
    """Count, no Args section."""
    return n


async def test_annotated_constraints_and_descriptions_reach_the_schema_and_the_call() -> None:
    """``Annotated[int, Field(ge=1, description=...)]`` was read without its extras: no
    minimum, no description in the schema, and the tool ran with ``n=0``."""
    count = tool(_count)
    assert count.parameters["properties"]["n"] == {
        "type": "integer",
        "minimum": 1,
        "description": "how many, at least 1",
    }
    with pytest.raises(ToolError, match="cannot take"):
        await count.invoke('{"n": 0}')
    assert await count.invoke('{"n": 3}') == "ran with n=3"

    agent = Agent(name="a", model="m", tools=[count], tool_errors="return")
    result, sent = await one_call(agent, "_count", {"n": 0})
    assert result.ok
    assert "ran with" not in sent
    assert "greater than or equal to 1" in sent


def test_the_docstring_description_wins_and_its_absence_keeps_the_hints() -> None:
    """The docstring's description replaces the hint's; without one the hint's stays (an
    explicit ``description=None`` used to wipe it)."""
    assert tool(_documented).parameters["properties"]["n"]["description"] == "from the docstring."
    undocumented = tool(_undocumented).parameters["properties"]["n"]
    assert undocumented == {
        "type": "integer",
        "minimum": 1,
        "default": 2,
        "description": "from the hint",
    }


class _Typed(TypedDict):
    a: int


class _Extended(typing_extensions.TypedDict):
    a: int


def _takes_typed(d: _Typed) -> int:
    """Read a typing.TypedDict."""
    return d["a"]


def _takes_extended(d: _Extended) -> int:
    """Read a typing_extensions.TypedDict."""
    return d["a"]


async def test_a_typing_typed_dict_before_3_12_says_what_to_use_instead() -> None:
    """pydantic takes a ``typing.TypedDict`` only from Python 3.12; before, the error said
    the type could not be described at all and hid pydantic's remedy."""
    if sys.version_info < (3, 12):
        with pytest.raises(ConfigError, match=r"parameter 'd' .*typing_extensions\.TypedDict"):
            tool(_takes_typed)
    else:
        assert await tool(_takes_typed).invoke('{"d": {"a": 1}}') == "1"
    assert await tool(_takes_extended).invoke('{"d": {"a": 1}}') == "1"


def _model_named(model_config: int, json: str, schema: bool = False, model_fields: int = 0) -> str:
    """Take parameters named as a pydantic model's own attributes."""
    return f"{model_config} {json} {schema} {model_fields}"


async def test_any_parameter_name_works_those_of_pydantic_models_too() -> None:
    """``model_config`` gave an empty schema and a tool no call could fill; ``json`` and
    ``schema`` warned that they shadow a ``BaseModel`` attribute. The parameters' names
    are now the fields' aliases."""
    t = tool(_model_named)
    assert t.parameters["properties"] == {
        "model_config": {"type": "integer"},
        "json": {"type": "string"},
        "schema": {"type": "boolean", "default": False},
        "model_fields": {"type": "integer", "default": 0},
    }
    assert t.parameters["required"] == ["model_config", "json"]
    arguments = '{"model_config": 3, "json": "j", "schema": true}'
    assert await t.invoke(arguments) == "3 j True 0"
    with pytest.raises(ToolError, match=r"model_config\n"):
        await t.invoke('{"json": "j"}')
    with pytest.raises(ToolError, match="p0"):  # the internal names are not the model's
        await t.invoke('{"p0": 3, "json": "j"}')


def _scale(x: float = float("inf")) -> float:
    """Scale, by default without bound."""
    return x


def _nan_default(x: float = float("nan")) -> float:
    """Take a NaN default."""
    return x


@pytest.mark.parametrize(("fn", "shown"), [(_scale, "inf"), (_nan_default, "nan")])
def test_a_non_finite_number_in_a_tools_schema_is_a_config_error(
    fn: Callable[..., float], shown: str
) -> None:
    """``x: float = float("inf")`` was sent as ``"default": null`` (msgspec), while
    ``Agent.tool_specs_json`` (the store's fingerprint, the prefix key) held ``Infinity``,
    which is not JSON."""
    says = rf"^tool '{fn.__name__}': {shown} at function\.parameters\.properties\.x\.default"
    with pytest.raises(ConfigError, match=says):
        tool(fn)
    with pytest.raises(ConfigError, match=says):
        Agent(name="a", model="m", tools=[fn])
    with pytest.raises(ConfigError, match=r"'h': inf at function\.parameters\.enum\[1\]"):
        Tool(name="h", description="", parameters={"enum": [1.0, math.inf]}, fn=fn)


def test_the_guide_quotes_the_error_a_non_finite_default_raises() -> None:
    """docs/guide.md said such a number was logged (like a name outside OpenAI's rule); it
    is refused, and the guide quotes the refusal."""
    guide = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    quoted = re.search(r"is a `ConfigError` naming the tool and where it\s+is: `([^`]+)`", guide)
    assert quoted is not None
    said = " ".join(quoted.group(1).split())

    def scale(x: float = float("inf")) -> float:
        """Scale, by default without bound."""
        return x

    with pytest.raises(ConfigError) as err:
        tool(scale)
    assert str(err.value) == said


def _top(n: int = pydantic.Field(3, ge=1, le=10, description="how many")) -> str:
    """Top n."""
    return f"n={n!r}"


async def test_a_pydantic_field_default_is_the_parameters_field() -> None:
    """``n: int = Field(3, ge=1, le=10, ...)`` (pydantic's validate_call idiom) was taken as a
    plain default: bounds, description and default missing from the schema and unchecked,
    and the tool called with ``n=FieldInfo(...)`` when the model left ``n`` out."""
    top = tool(_top)
    assert top.parameters["properties"]["n"] == {
        "type": "integer",
        "default": 3,
        "minimum": 1,
        "maximum": 10,
        "description": "how many",
    }
    assert "required" not in top.parameters
    assert await top.invoke("{}") == "n=3"
    assert await top.invoke('{"n": 5}') == "n=5"
    with pytest.raises(ToolError, match="less than or equal to 10"):
        await top.invoke('{"n": 50}')


class _NeedsAPackage(str):
    """A type whose schema needs a package not installed, as ``pydantic.EmailStr``'s
    needs email-validator."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> object:
        raise ImportError("email-validator is not installed")


def _notify(to: _NeedsAPackage, body: str) -> str:
    return "sent"


def test_a_type_needing_a_missing_package_is_a_config_error_naming_the_parameter() -> None:
    """It escaped ``@tool`` and ``Agent(tools=...)`` as a bare ImportError naming neither
    the tool nor the parameter."""
    for make in (tool, lambda fn: Agent(name="a", model="m", tools=[fn])):
        with pytest.raises(ConfigError) as info:
            make(_notify)
        assert "tool '_notify': parameter 'to'" in str(info.value)
        assert "email-validator is not installed" in str(info.value)
