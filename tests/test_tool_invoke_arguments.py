"""``Tool.invoke`` takes the model's JSON text: anything else is a ConfigError naming
the tool."""

from __future__ import annotations

import pytest

from agentflow import ConfigError, tool


@tool
def search(query: str) -> str:
    """Search."""
    return "hit"


@pytest.mark.parametrize("arguments", [{"query": "x"}, None, 5])
async def test_arguments_that_are_not_json_text_are_a_config_error(arguments: object) -> None:
    """A dict (or None) was a bare AttributeError ('dict' object has no attribute
    'strip'), naming neither the tool nor what to pass."""
    with pytest.raises(ConfigError, match=r"tool 'search': Tool\.invoke takes the arguments as"):
        await search.invoke(arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "arguments", ['{"query": "x"}', b'{"query": "x"}', bytearray(b'{"query": "x"}')]
)
async def test_json_text_is_taken(arguments: str | bytes | bytearray) -> None:
    """Its UTF-8 bytes too; a bytearray was refused as no JSON text, though it worked before."""
    assert await search.invoke(arguments) == "hit"
