"""``Agent.tools`` and ``Agent.context`` are typed as an agent holds them — a tuple of
:class:`Tool` and one context link — while ``Agent(...)`` still takes callables and a
list of links. They were typed as given (``Collection[Tool | Callable]``,
``ContextLink | Sequence[Any] | None``), so reading them took a cast under ``mypy
--strict``. This file is checked by the project's ``mypy`` run: its reads have no cast."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from agentflow import Agent, Tool, tool
from agentflow import _agent as agent_module
from agentflow.context import CacheBusterCheck, ContextBudget, ContextChain
from agentflow.typing import ContextLink


def add(x: int, y: int) -> int:
    """Add two numbers.

    Args:
        x: one.
        y: the other.
    """
    return x + y


@tool
def neg(x: int) -> int:
    """Negate a number.

    Args:
        x: the number.
    """
    return -x


def test_tools_read_as_tools_and_context_as_a_link() -> None:
    agent = Agent(
        name="a",
        model="m",
        tools=[add, neg],  # a plain function and a Tool, as before
        context=[ContextBudget(window=4096), CacheBusterCheck()],
    )
    tools: tuple[Tool, ...] = agent.tools  # no cast: the type says what it holds
    assert [t.name for t in tools] == ["add", "neg"]
    assert all(t.spec()["function"]["name"] == t.name for t in agent.tools)
    context: ContextLink | None = agent.context
    assert isinstance(context, ContextChain)
    assert Agent(name="b", model="m", tools={neg}, context=None).tools == (neg,)


def test_the_typed_init_says_what_the_generated_one_takes() -> None:
    """The ``__init__`` type checkers read (under ``TYPE_CHECKING``) names the generated
    one's parameters, in order, with its defaults: the two cannot drift apart."""
    tree = ast.parse(inspect.getsource(agent_module))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Agent"]
    (typed,) = [
        f
        for block in cls.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for f in block.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    ]
    stated = {
        a.arg: ast.unparse(d) if d is not None else None
        for a, d in zip(typed.args.kwonlyargs, typed.args.kw_defaults, strict=True)
    }
    generated = inspect.signature(Agent).parameters
    assert list(stated) == list(generated)
    for name, param in generated.items():
        default = stated[name]
        if param.default is inspect.Parameter.empty:
            assert default is None, name
        elif repr(param.default) == "<factory>":  # a default_factory's field
            made = Agent.__dataclass_fields__[name].default_factory
            assert default is not None and callable(made), name
            assert eval(default, vars(agent_module)) == made(), name
        else:
            assert default is not None, name
            assert eval(default, vars(agent_module)) == param.default, name


@dataclass(frozen=True, kw_only=True)
class TeamAgent(Agent):
    team: str = "core"


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnHashAgent(Agent):
    def __hash__(self) -> int:
        return 7


def test_a_dataclass_subclass_of_agent_is_hashable_as_an_agent() -> None:
    """A subclass's own ``@dataclass`` generated a hash of every field, ``params`` (a
    dict) among them: ``{MyAgent(...): 1}`` raised TypeError. Its tools are passed as a
    tuple of tools: its ``__init__`` is typed from the fields (this file is type-checked)."""
    agent = TeamAgent(name="a", model="m", tools=(neg,), params={"temperature": 0.2}, team="t")
    same = TeamAgent(name="a", model="m", tools=(neg,), params={"temperature": 0.2}, team="t")
    assert {agent: 1}[same] == 1
    assert hash(agent) == hash(Agent(name="a", model="m"))
    assert agent.tools == (neg,)
    assert hash(OwnHashAgent(name="a", model="m")) == 7  # a subclass's own hash is kept
