"""The demo's workload: a fleet of coding agents working on one small repository.

Every agent shares one prompt prefix — instructions, the tool schemas and a long
repository guide — so the server's prefix cache can serve it after the first
prefill. Each agent works in its own copy of an in-memory repository through real
Python tools: listing, reading and searching files, editing them, and running the
repository's tests (each module is compiled and its ``test_*`` functions executed).
All agents share one context policy, so that prefixes are compared (and, with a budget
that fingerprints them, measured) across every session of the run.
"""

# No ``from __future__ import annotations`` here: the tools' ``path`` parameters are
# annotated with a Literal built at run time, which only works with eager annotations.
import asyncio
import functools
import random
import textwrap
import traceback
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from agentflow._agent import Agent
from agentflow._context_chain import ContextChain
from agentflow._tools import Tool
from agentflow.context._budget import ContextBudget
from agentflow.context._cachebuster import CacheBusterCheck
from agentflow.context._fingerprint import PrefixIndex
from agentflow.planner import DEFAULT_DEPLOYMENT, get_deployment
from agentflow.typing import ContextPolicy

__all__ = ["BUILD_CHUNK", "Repository", "Workload", "build_workload", "make_workload"]

#: Agents :func:`build_workload` builds between two turns of the event loop.
BUILD_CHUNK = 64

_MODULES = (
    "cache", "queue", "router", "tokens", "budget", "retry", "limits", "metrics",
    "report", "session", "fleet", "store",
)  # fmt: skip

_GUIDE_WORDS = """module function cache queue token budget retry limit metric report session
fleet store block prefix request response stream latency throughput invariant test interface
boundary owner contract error timeout backoff window schedule""".split()

INSTRUCTIONS = """You are a senior Python engineer working in a shared repository.
Work in small steps: look at the files, read what you need, run the tests, fix what fails,
and finish with a short summary of what you changed and why. Never invent files; use the
tools to look things up. Keep edits minimal and keep every test passing."""


def _module_source(name: str, i: int) -> str:
    return textwrap.dedent(f'''\
        """The {name} module: helpers for the {name} subsystem."""


        def scale_{name}(value: int, factor: int = {i + 2}) -> int:
            """Scale a {name} value by a factor."""
            return value * factor


        def clamp_{name}(value: int, low: int = 0, high: int = {100 + i}) -> int:
            """Clamp a {name} value into [low, high]."""
            return max(low, min(high, value))


        def test_scale_{name}() -> None:
            assert scale_{name}(3) == {3 * (i + 2)}


        def test_clamp_{name}() -> None:
            assert clamp_{name}(-5) == 0
            assert clamp_{name}(10_000) == {100 + i}
        ''')


def repository_guide(paragraphs: int, seed: int = 0) -> str:
    """A long, deterministic design document every agent gets in its prompt."""
    rng = random.Random(seed)
    words = _GUIDE_WORDS
    out = ["REPOSITORY GUIDE", ""]
    for p in range(paragraphs):
        mod = _MODULES[p % len(_MODULES)]
        body = " ".join(rng.choice(words) for _ in range(60))
        out.append(f"Section {p + 1} ({mod}.py): {body}.")
    return "\n".join(out)


@dataclass
class Repository:
    """An in-memory repository: path → source. Each agent edits its own copy."""

    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def sample(cls) -> "Repository":
        """The demo's repository: one module per subsystem, each with its tests."""
        return cls({f"src/{m}.py": _module_source(m, i) for i, m in enumerate(_MODULES)})

    def copy(self) -> "Repository":
        """An independent copy."""
        return Repository(dict(self.files))

    def tools(self) -> list[Tool]:
        """Real tools over this repository (paths are an enum, so a model cannot invent one).

        The tools are described once per set of paths (pydantic builds a model and a
        schema per tool, a few milliseconds for the five: for every agent of a large
        fleet that took seconds on the event loop) and bound to this repository: each
        tool's schema is the described one, byte for byte.
        """
        functions = self._functions()
        described = _described_tools(tuple(sorted(self.files)))
        return [tool._with_function(fn) for tool, fn in zip(described, functions, strict=True)]

    def _functions(self) -> tuple[Callable[..., str], ...]:
        """The tools' functions over this repository, in :meth:`tools`' order."""
        paths = tuple(sorted(self.files))
        Path = Literal[paths]  # type: ignore[valid-type]

        def list_files(prefix: str = "src/") -> str:
            """List the repository's files under a prefix.

            Args:
                prefix: only paths starting with this.
            """
            return "\n".join(p for p in sorted(self.files) if p.startswith(prefix)) or "(none)"

        def read_file(path: Path, start_line: int = 1, max_lines: int = 80) -> str:
            """Read lines of a file.

            Args:
                path: the file.
                start_line: first line to return (1-based).
                max_lines: how many lines at most.
            """
            lines = self.files[path].splitlines()
            first = max(start_line, 1) - 1
            chunk = lines[first : first + max(1, min(max_lines, 400))]
            return "\n".join(f"{first + n + 1:4} {line}" for n, line in enumerate(chunk))

        def search(query: str) -> str:
            """Find lines containing a text, across the repository.

            Args:
                query: the text to look for.
            """
            hits = [
                f"{p}:{n}: {line.strip()}"
                for p, src in sorted(self.files.items())
                for n, line in enumerate(src.splitlines(), 1)
                if query and query in line
            ]
            return "\n".join(hits[:50]) or f"no match for {query!r}"

        def run_tests(path: Path) -> str:
            """Compile a module and run its test_* functions.

            Args:
                path: the module to test.
            """
            return _run_module_tests(path, self.files[path])

        def replace_in_file(path: Path, old: str, new: str) -> str:
            """Replace the first occurrence of a text in a file.

            Args:
                path: the file to edit.
                old: the exact text to replace.
                new: the replacement.
            """
            src = self.files[path]
            if not old or old not in src:
                return f"not found in {path}; nothing changed"
            self.files[path] = src.replace(old, new, 1)
            return f"edited {path}"

        return list_files, read_file, search, run_tests, replace_in_file


@functools.lru_cache(maxsize=16)
def _described_tools(paths: tuple[str, ...]) -> tuple[Tool, ...]:
    """The demo's tools for a repository of these paths, described once; their functions
    are bound to a repository with these paths and no content (each agent's tools are
    these with its own repository's functions)."""
    *read_only, edit = Repository(dict.fromkeys(paths, ""))._functions()
    # An edit lives in this in-memory copy only: a resumed run (agentflow resume)
    # replays the recorded edits so that later reads see them again.
    return (
        *(Tool.from_function(f, in_thread=False) for f in read_only),
        Tool.from_function(edit, in_thread=False, replay_on_resume=True),
    )


def _run_module_tests(path: str, source: str) -> str:
    try:
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        return f"{path}: syntax error at line {exc.lineno}: {exc.msg}"
    namespace: dict[str, Any] = {"__name__": path}
    exec(code, namespace)  # the repository is the demo's own generated code
    results = []
    for name, fn in sorted(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                results.append(f"PASS {name}")
            except Exception:
                results.append(f"FAIL {name}\n{traceback.format_exc(limit=1)}")
    return "\n".join(results) or f"{path}: no tests"


@dataclass(frozen=True)
class Workload:
    """The agents of one demo run, and how many tool rounds each is to take.

    Attributes:
        agents: one per session.
        tasks: each agent's task (its first user message).
        tool_rounds: each agent's planned tool rounds.
        shared_prefix_chars: characters of the instructions every agent shares.
        context: the context policy every agent has (one instance, shared).
    """

    agents: list[Agent]
    tasks: list[str]
    tool_rounds: list[int]
    shared_prefix_chars: int
    context: ContextPolicy | None = None


def make_workload(
    n_agents: int,
    *,
    model: str,
    seed: int = 0,
    turns: tuple[int, int] = (5, 20),
    guide_paragraphs: int = 60,
    max_tokens: int = 160,
    sim_tool_rounds: bool = True,
    make_params: Callable[[int], dict[str, Any]] | None = None,
    context: ContextPolicy | None = None,
    window: int | None = None,
) -> Workload:
    """Build ``n_agents`` coding agents with one shared prefix (in one go: on an event
    loop, :func:`build_workload`).

    Args:
        n_agents: how many agents (one session each).
        model: the model name to request.
        seed: fixes the guide, the tasks and each agent's number of turns.
        turns: (min, max) model turns per agent (tool rounds + the final answer).
        guide_paragraphs: length of the shared repository guide (≈ 70 tokens each).
        max_tokens: output limit per turn.
        sim_tool_rounds: ask agentflow's simulator for each agent's tool rounds through
            the ``agentflow_tool_rounds`` body field (only meaningful on the simulator).
        make_params: extra per-agent body fields, by agent index.
        context: the context policy every agent gets (one instance, so it sees every
            session); by default a :class:`~agentflow.context.ContextBudget` over
            ``window`` that fingerprints prefixes (for prefix-reuse efficiency) and runs
            a cache-buster check comparing every agent's prefix with every other's
            (they are meant to be equal).
        window: the model's context window for the default budget; by default the
            planner's default deployment's ``max_model_len`` (the report's 1,000,000).
    """
    building = _building(
        n_agents,
        model=model,
        seed=seed,
        turns=turns,
        guide_paragraphs=guide_paragraphs,
        max_tokens=max_tokens,
        sim_tool_rounds=sim_tool_rounds,
        make_params=make_params,
        context=context,
        window=window,
    )
    while True:
        try:
            next(building)
        except StopIteration as built:
            workload: Workload = built.value
            return workload


async def build_workload(n_agents: int, **options: Any) -> Workload:
    """:func:`make_workload`'s workload (the same, for the same arguments), built
    :data:`BUILD_CHUNK` agents at a time with the event loop running in between.

    A large fleet's agents take seconds to build (20,000: about 12 s), which in one go
    held the loop that long: a Ctrl-C or SIGTERM (which cancels the run's task on the
    loop) was not handled until the build ended. Now the build is cancelled at its next
    chunk.
    """
    building = _building(n_agents, **options)
    while True:
        try:
            next(building)
        except StopIteration as built:
            workload: Workload = built.value
            return workload
        await asyncio.sleep(0)


def _building(
    n_agents: int,
    *,
    model: str,
    seed: int = 0,
    turns: tuple[int, int] = (5, 20),
    guide_paragraphs: int = 60,
    max_tokens: int = 160,
    sim_tool_rounds: bool = True,
    make_params: Callable[[int], dict[str, Any]] | None = None,
    context: ContextPolicy | None = None,
    window: int | None = None,
) -> Generator[None, None, Workload]:
    """:func:`make_workload`'s work, pausing (``yield``) after each :data:`BUILD_CHUNK`
    agents; the workload is its return value."""
    if context is None:
        context = ContextChain(
            [
                ContextBudget(window=window or get_deployment(DEFAULT_DEPLOYMENT).context_limit),
                CacheBusterCheck(group=lambda name: "coder"),
                PrefixIndex(),
            ]
        )
    rng = random.Random(seed)
    repo = Repository.sample()
    guide = repository_guide(guide_paragraphs, seed)
    instructions = f"{INSTRUCTIONS}\n\n{guide}"
    agents: list[Agent] = []
    tasks: list[str] = []
    rounds: list[int] = []
    for i in range(n_agents):
        n_turns = rng.randint(*turns)
        params: dict[str, Any] = {"temperature": 0, "max_tokens": max_tokens}
        if sim_tool_rounds:
            params["agentflow_tool_rounds"] = n_turns - 1
        if make_params is not None:
            params.update(make_params(i))
        agents.append(
            Agent(
                name=f"coder-{i:03d}",
                model=model,
                instructions=instructions,
                tools=repo.copy().tools(),
                params=params,
                max_turns=n_turns + 2,
                context=context,
            )
        )
        mod = _MODULES[i % len(_MODULES)]
        tasks.append(f"Task {i}: make sure src/{mod}.py is correct and its tests pass.")
        rounds.append(n_turns - 1)
        if (i + 1) % BUILD_CHUNK == 0:
            yield
    return Workload(agents, tasks, rounds, len(instructions), context)
