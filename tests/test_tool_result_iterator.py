"""A tool that returns an iterator — a generator (a ``yield`` in the tool), an async
generator, ``map``, ``filter``, ``iter(...)`` — fails with a :class:`ToolError` telling
it to return a list. Its ``repr`` (``<generator object ... at 0x...>``) used to reach
the model as a successful result; agentflow does not consume it (it may never end)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from agentflow import Agent, Tool, ToolError, tool
from tests.toolcall import one_call


@tool
def list_files(pattern: str) -> Iterator[str]:
    """List files matching a pattern.

    Args:
        pattern: a glob.
    """
    yield "a.py"


@tool
async def stream_lines(path: str) -> AsyncIterator[str]:
    """Yield a file's lines.

    Args:
        path: the file.
    """
    yield "line"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (lambda: map(str, [1, 2]), "map"),
        (lambda: filter(None, [1, 0]), "filter"),
        (lambda: iter([1, 2]), "list_iterator"),
        (lambda: (n for n in range(3)), "generator"),
    ],
)
async def test_an_iterator_result_is_a_tool_error(value: object, kind: str) -> None:
    assert callable(value)
    t = Tool.from_function(lambda: value(), name="get", in_thread=False)
    with pytest.raises(ToolError, match=rf"tool 'get' returned an iterator \({kind}\)") as info:
        await t.invoke("{}")
    assert "return a list" in str(info.value) and info.value.tool == "get"


async def test_generator_tools_are_tool_errors() -> None:
    with pytest.raises(ToolError, match=r"'list_files' returned an iterator \(generator\)"):
        await list_files.invoke('{"pattern": "*"}')
    with pytest.raises(ToolError, match=r"'stream_lines' returned an iterator \(async_gen"):
        await stream_lines.invoke('{"path": "f"}')


async def test_the_model_reads_the_error_not_the_repr() -> None:
    agent = Agent(name="a", model="m", tools=[list_files])
    result, sent = await one_call(agent, "list_files", {"pattern": "*"})
    assert result.ok, result.error
    assert sent.startswith("Error: tool 'list_files' returned an iterator (generator)")
    assert "return a list" in sent and "object at 0x" not in sent


async def test_an_iterable_that_is_not_an_iterator_is_still_json() -> None:
    """A list, a tuple, a dict's values: JSON as before."""
    for value, text in (([1, 2], "[1,2]"), ((1,), "[1]"), ({"a": 1}, '{"a":1}')):
        t = Tool.from_function(_returning(value), name="get", in_thread=False)
        assert await t.invoke("{}") == text


def _returning(value: object) -> Callable[[], object]:
    return lambda: value
