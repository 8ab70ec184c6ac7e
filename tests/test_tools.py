"""Tools from typed callables: schema from the signature, descriptions from the docstring."""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
from collections.abc import Callable
from typing import Literal

import jsonschema
import msgspec
import pydantic
import pytest

from agentflow import Agent, ConfigError, Tool, ToolError, ToolTimeout, tool
from tests.toolcall import one_call
from tests.wait import GUARD_S


class Point(pydantic.BaseModel):
    x: int
    y: int


@tool
def move(to: Point, speed: float = 1.0, mode: Literal["walk", "run"] = "walk") -> dict[str, object]:
    """Move the robot.

    Args:
        to: where to go.
        speed: metres per second.
    """
    return {"x": to.x, "speed": speed, "mode": mode}


def test_schema_from_signature_and_docstring() -> None:
    """Types, defaults, enums, nested models and per-parameter docs all land in the schema."""
    spec = move.spec()["function"]
    assert spec["name"] == "move" and spec["description"] == "Move the robot."
    params = spec["parameters"]
    assert params["required"] == ["to"]
    assert params["properties"]["speed"] == {
        "default": 1.0,
        "description": "metres per second.",
        "type": "number",
    }
    assert params["properties"]["mode"]["enum"] == ["walk", "run"]
    jsonschema.Draft202012Validator.check_schema(params)
    jsonschema.validate({"to": {"x": 1, "y": 2}}, params)


async def test_invoke_validates_and_converts() -> None:
    """Arguments are validated and converted (a nested dict becomes the model)."""
    out = await move.invoke('{"to": {"x": 3, "y": 4}, "mode": "run"}')
    assert out == '{"x":3,"speed":1.0,"mode":"run"}'


async def test_bad_arguments_are_a_tool_error() -> None:
    """Missing, extra or mistyped arguments raise ToolError naming the tool."""
    for bad in ('{"speed": 2}', '{"to": {"x": 1, "y": 1}, "extra": 1}', "not json"):
        with pytest.raises(ToolError) as info:
            await move.invoke(bad)
        assert info.value.tool == "move"


async def test_sync_tools_run_off_the_event_loop_and_async_tools_on_it() -> None:
    """Sync tools run in a worker thread (never stalling other agents); async ones in the loop."""
    loop_thread = threading.get_ident()

    def where() -> int:
        return threading.get_ident()

    async def where_async() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    assert int(await Tool.from_function(where).invoke("{}")) != loop_thread
    assert int(await Tool.from_function(where_async).invoke("")) == loop_thread
    assert int(await Tool.from_function(where, in_thread=False).invoke("{}")) == loop_thread


async def test_a_raising_tool_becomes_a_tool_error() -> None:
    """The tool's exception is wrapped, its type and message kept."""

    def boom() -> str:
        raise RuntimeError("disk on fire")

    with pytest.raises(ToolError, match="RuntimeError: disk on fire"):
        await Tool.from_function(boom).invoke("{}")


def test_undescribable_functions_are_config_errors() -> None:
    """Missing hints and *args cannot become a schema: ConfigError naming the parameter."""

    def no_hint(x):  # type: ignore[no-untyped-def]
        return x

    def star(*xs: int) -> int:
        return 0

    with pytest.raises(ConfigError, match="'x' needs a type hint"):
        Tool.from_function(no_hint)
    with pytest.raises(ConfigError, match=r"\*xs"):
        Tool.from_function(star)


def _takes_a_socket(sock: socket.socket) -> str:
    """Send on a socket."""
    return ""


def _takes_a_callable(n: int, then: Callable[[int], int] | None = None) -> str:
    """Apply a function."""
    return ""


@pytest.mark.parametrize(
    ("fn", "says"),
    [
        (_takes_a_socket, r"parameter 'sock' has a type .*socket\.socket \(PydanticSchema"),
        (_takes_a_callable, r"parameter 'then' has a type .*Callable\[\[int\], int\] \| None"),
    ],
)
def test_a_parameter_type_no_schema_describes_is_a_config_error(
    fn: Callable[..., str], says: str
) -> None:
    """A type pydantic cannot describe (a socket, a callable) was pydantic's own error,
    from ``@tool`` and from ``Agent(tools=...)``, naming neither tool nor parameter."""
    name = fn.__name__
    with pytest.raises(ConfigError, match=f"^tool '{name}': {says}"):
        tool(fn)
    with pytest.raises(ConfigError, match=f"^tool '{name}': {says}"):
        Agent(name="a", model="m", tools=[fn])


def test_decorator_with_options() -> None:
    """`@tool(name=..., description=...)` overrides what the function says."""

    @tool(name="lookup", description="Find a thing.")
    def f(q: str) -> str:
        return q

    assert (f.name, f.description) == ("lookup", "Find a thing.")


def _noop() -> None:
    return None


def test_spec_is_canonical_whatever_the_build_order() -> None:
    """Keys are sorted at every level (lists keep their order), so the same schema built in
    two orders encodes to the same bytes."""
    a = Tool(
        name="f",
        description="d",
        parameters={"type": "object", "required": ["z", "a"], "properties": {"z": {}, "a": {}}},
        fn=_noop,
    )
    b = Tool(
        name="f",
        description="d",
        parameters={"properties": {"a": {}, "z": {}}, "required": ["z", "a"], "type": "object"},
        fn=_noop,
    )
    assert msgspec.json.encode(a.spec()) == msgspec.json.encode(b.spec())
    assert msgspec.json.encode(a.spec()) == (
        b'{"function":{"description":"d","name":"f","parameters":{"properties":{"a":{},"z":{}},'
        b'"required":["z","a"],"type":"object"}},"type":"function"}'
    )
    schema = move.spec()
    assert msgspec.json.encode(schema) == msgspec.json.encode(schema, order="sorted")


def test_spec_is_computed_once() -> None:
    """The same object on every call; changing ``parameters`` afterwards changes nothing."""
    params: dict[str, object] = {"type": "object", "properties": {}}
    t = Tool(name="f", description="d", parameters=params, fn=_noop)
    first = t.spec()
    params["properties"] = {"x": {"type": "string"}}
    assert t.spec() is first
    assert first["function"]["parameters"] == {"properties": {}, "type": "object"}


def test_schemas_json_cannot_carry_are_config_errors() -> None:
    """A non-dict schema, a non-string key or a value JSON has no form for fail at once."""
    with pytest.raises(ConfigError, match="must be a JSON schema object"):
        Tool(name="f", description="", parameters=[], fn=_noop)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="keys must be strings"):
        Tool(name="f", description="", parameters={"properties": {1: {}}}, fn=_noop)
    with pytest.raises(ConfigError, match="not JSON"):
        Tool(name="f", description="", parameters={"default": object()}, fn=_noop)


async def _fetch(url: str) -> str:
    return f"fetched {url}"


@functools.wraps(_fetch)
def _plain_wrapper(*args: object, **kwargs: object) -> object:
    """A plain decorator's wrapper around an async function: it returns the coroutine."""
    return _fetch(*args, **kwargs)  # type: ignore[arg-type]


class _Fetcher:
    """Fetch a page (a callable object)."""

    async def __call__(self, url: str) -> str:
        return f"object fetched {url}"


@pytest.mark.parametrize("in_thread", [True, False])
async def test_a_plain_wrapper_of_an_async_tool_is_awaited(in_thread: bool) -> None:
    """Not the coroutine's repr: what the coroutine returns, in a thread or not."""
    t = Tool.from_function(_plain_wrapper, name="fetch", in_thread=in_thread)
    assert await t.invoke('{"url": "a"}') == "fetched a"


async def test_a_callable_object_is_a_tool() -> None:
    t = Tool.from_function(_Fetcher())
    assert t.name == "_Fetcher"
    assert t.spec()["function"]["parameters"]["required"] == ["url"]
    assert await t.invoke('{"url": "b"}') == "object fetched b"
    with pytest.raises(ConfigError, match="is not callable"):
        Tool.from_function(42, name="n")  # type: ignore[arg-type]


async def test_a_tools_own_cancelled_error_is_a_tool_error() -> None:
    """The tool awaits an inner task that is cancelled: that is the tool's failure (its
    ToolError goes back to the model), not the session's cancellation."""

    @tool(in_thread=False)
    async def inner() -> str:
        """Wait on a task that gets cancelled."""
        task = asyncio.ensure_future(asyncio.sleep(3600))
        asyncio.get_running_loop().call_soon(task.cancel)
        await task
        return "never"

    with pytest.raises(ToolError, match="'inner' raised CancelledError") as info:
        await inner.invoke("{}")
    assert info.value.tool == "inner"


async def test_a_cancelled_call_is_still_cancelled() -> None:
    started = asyncio.Event()

    @tool(in_thread=False)
    async def slow() -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    call = asyncio.ensure_future(slow.invoke("{}"))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_result_that_cannot_be_text_is_a_tool_error() -> None:
    @tool(in_thread=False)
    def cyclic() -> list[object]:
        """A list that holds itself."""
        out: list[object] = []
        out.append(out)
        return out

    with pytest.raises(ToolError, match="'cyclic' returned a list that cannot be made text"):
        await cyclic.invoke("{}")


def _exits(code: str) -> str:
    """Exit like a CLI given bad arguments (argparse's ``parser.error``)."""
    raise SystemExit(f"usage: grep PATTERN: bad {code}")


async def _exits_async(code: str) -> str:
    """The same, from a coroutine."""
    raise SystemExit(2)


@pytest.mark.parametrize(
    ("fn", "in_thread", "message"),
    [
        (_exits, True, "usage: grep PATTERN: bad x"),  # raised in the worker thread
        (_exits, False, "usage: grep PATTERN: bad x"),  # raised on the event loop
        (_exits_async, True, "2"),
    ],
)
async def test_a_tool_that_exits_is_a_tool_error(fn: object, in_thread: bool, message: str) -> None:
    """``SystemExit`` from a tool (argparse, ``sys.exit()``) is the tool's failure, which
    the model hears of: it used to end every session of the run, and the process."""
    t = Tool.from_function(fn, name="grep", in_thread=in_thread)  # type: ignore[arg-type]
    with pytest.raises(ToolError, match=f"'grep' raised SystemExit: {message}") as info:
        await t.invoke('{"code": "x"}')
    assert info.value.tool == "grep" and isinstance(info.value.__cause__, SystemExit)


async def test_keyboard_interrupt_in_a_tool_is_not_swallowed() -> None:
    """The user's Ctrl-C is theirs, not the tool's failure: it goes on up."""

    @tool(in_thread=False)
    def interrupted() -> str:
        """Interrupted."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await interrupted.invoke("{}")


@pytest.mark.parametrize("raised", [KeyboardInterrupt, GeneratorExit])
async def test_an_interrupt_a_sync_tool_raises_in_its_thread_is_its_failure(
    raised: type[BaseException],
) -> None:
    """Ctrl-C is delivered to the main thread only, so a ``KeyboardInterrupt`` (or a
    ``GeneratorExit``) raised in a sync tool's worker thread is the tool's own: a
    ``ToolError`` the model hears of. It used to stop the session's task, the run and
    the process."""

    @tool
    def interrupted() -> str:
        """Interrupted."""
        raise raised("in the tool's thread")

    with pytest.raises(ToolError, match=f"'interrupted' raised {raised.__name__}") as info:
        await interrupted.invoke("{}")
    assert isinstance(info.value.__cause__, raised)

    agent = Agent(name="a", model="m", tools=[interrupted])
    result, sent = await one_call(agent, "interrupted", {})
    assert result.ok
    assert sent.startswith(f"Error: tool 'interrupted' raised {raised.__name__}")


async def test_a_stop_iteration_a_sync_tool_raises_in_its_thread_is_its_failure() -> None:
    """``next()`` on an empty iterator in a sync tool: asyncio cannot set a
    ``StopIteration`` on the call's future, which stayed pending, so the call waited out
    its whole limit (300 s by default) and ended a false ``ToolTimeout``. It is the
    tool's ``ToolError`` at once. (The limit here is only a hang guard.)"""

    @tool(timeout_s=GUARD_S)
    def first_item(xs: list[int]) -> int:
        """The first item."""
        return next(iter(xs))

    with pytest.raises(ToolError, match="'first_item' raised StopIteration") as info:
        await first_item.invoke('{"xs": []}')
    assert not isinstance(info.value, ToolTimeout)
    assert isinstance(info.value.__cause__, StopIteration)


def test_parameters_no_call_could_fill_are_config_errors() -> None:
    """A positional-only parameter (the model's arguments are passed by name: every call
    used to fail) and one named with a leading ``_`` (it used to be pydantic's own
    error) are refused when the tool is made, naming the parameter."""

    def posonly(path: str, /, limit: int = 5) -> str:
        return path

    def private(_path: str) -> str:
        return _path

    with pytest.raises(ConfigError, match=r"tool 'posonly': parameter 'path' is positional-only"):
        Tool.from_function(posonly)
    with pytest.raises(ConfigError, match=r"tool 'private': parameter '_path' starts with '_'"):
        Tool.from_function(private)


def _search(query: str, limit: int, *, site: str = "docs") -> str:
    """Search the index.

    Args:
        query: what to look for.
        limit: how many hits.
        site: which site.
    """
    return f"{query}:{limit}:{site}"


async def _fetch_page(base: str, path: str) -> str:
    """Fetch a page."""
    return base + path


async def test_a_partial_is_described_by_its_function_less_what_it_binds() -> None:
    """``functools.partial`` used to be refused as a ``*args`` function. Its name, hints
    and docstring are the function's; what it binds, by keyword or position, is fixed and
    not in the schema; an async function's partial is awaited."""
    t = Tool.from_function(functools.partial(_search, limit=5))
    assert (t.name, t.description) == ("_search", "Search the index.")
    params = t.spec()["function"]["parameters"]
    assert list(params["properties"]) == ["query", "site"] and params["required"] == ["query"]
    assert params["properties"]["query"]["description"] == "what to look for."
    assert await t.invoke('{"query": "x"}') == "x:5:docs"
    with pytest.raises(ToolError, match="limit"):  # fixed: the model cannot set it
        await t.invoke('{"query": "x", "limit": 50}')
    nested = Tool.from_function(functools.partial(functools.partial(_search, "q"), site="w"))
    assert list(nested.parameters["properties"]) == ["limit"]
    assert await nested.invoke('{"limit": 2}') == "q:2:w"
    fetch = Tool.from_function(functools.partial(_fetch_page, "https://x"), name="fetch")
    assert await fetch.invoke('{"path": "/a"}') == "https://x/a"
    with pytest.raises(ConfigError, match="tool '_search': cannot read the signature"):
        Tool.from_function(functools.partial(_search, nope=1))  # type: ignore[call-arg]
