"""The public surface: the top level is what docs/api/agentflow.md documents, names that
moved resolve with a DeprecationWarning, exported classes report their public module,
`import agentflow` loads little, and typing.py and the events module import nothing above
them.

Counted, never timed: which modules a fresh interpreter holds after an import.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import pytest

import agentflow

ROOT = Path(__file__).parents[1]
API_PAGE = (ROOT / "docs" / "api" / "agentflow.md").read_text()
# Not agentflow.planner: a pure calculator that imports only agentflow._errors
# (tests/planner/test_exports.py), so its classes keep their defining modules.
NAMESPACES = (
    "agentflow",
    "agentflow.bench",
    "agentflow.context",
    "agentflow.embedded",
    "agentflow.llamacpp",
    "agentflow.report",
    "agentflow.sched",
    "agentflow.stats",
    "agentflow.store",
    "agentflow.testing",
    "agentflow.transport",
    "agentflow.typing",
)


def _section(title: str) -> str:
    return API_PAGE.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].split("\n::: ", 1)[0]


def _agentflow_modules(code: str) -> list[str]:
    """The agentflow modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout
    return [m for m in ast.literal_eval(out.splitlines()[-1]) if m.split(".")[0] == "agentflow"]


def test_top_level_is_what_the_docs_document() -> None:
    """docs/api/agentflow.md lists exactly `agentflow.__all__`, and says how many."""
    listed = re.findall(r"`([A-Za-z_]+)`", _section("The top-level names"))
    assert sorted(listed) == sorted(agentflow.__all__)
    assert len(listed) == len(set(listed)) == len(agentflow.__all__) == 69
    stated = re.search(r"(\d+) names \(`agentflow.__all__`", API_PAGE)
    assert stated is not None and int(stated.group(1)) == len(agentflow.__all__)


def test_moved_names_warn_with_their_new_path_and_resolve() -> None:
    """Every name that left the top level is in the docs' table with its import, and
    `agentflow.<name>` still gives the same object, with a DeprecationWarning naming it."""
    moved = agentflow._MOVED
    table = dict(re.findall(r"^\| `(\w+)` \| `(from [\w.]+ import \w+)`", API_PAGE, re.M))
    assert table == {name: f"from {m} import {new}" for name, (m, new) in moved.items()}
    assert len(moved) == 64 and not set(moved) & set(agentflow.__all__)
    for name, (module, new) in moved.items():
        with pytest.warns(DeprecationWarning, match=f"agentflow.{name} is") as caught:
            value = getattr(agentflow, name)
        assert value is getattr(importlib.import_module(module), new)
        assert len(caught) == 1
        assert f"agentflow.{name} is deprecated" in str(caught[0].message)
        assert f"from {module} import {new}" in str(caught[0].message)
        assert caught[0].filename == __file__  # the warning points at the caller


def test_old_from_import_still_works() -> None:
    """`from agentflow import FleetStats` (the old spelling) works, warning once."""
    with pytest.warns(DeprecationWarning, match=r"from agentflow\.stats import FleetStats"):
        from agentflow import FleetStats
    from agentflow.stats import FleetStats as NewFleetStats

    assert FleetStats is NewFleetStats


def test_current_names_do_not_warn_and_unknown_names_fail() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in agentflow.__all__:
            getattr(agentflow, name)
    with pytest.raises(AttributeError, match="no attribute 'Flet'"):
        agentflow.Flet  # type: ignore[attr-defined]  # noqa: B018


def test_a_misspelled_name_is_a_type_error(tmp_path: Path) -> None:
    """``agentflow`` and ``agentflow.report`` resolve names lazily with a module
    ``__getattr__``; checkers must not see it, or ``mypy --strict`` typed any misspelled
    name ``Any`` and passed. Imports past the two modules are skipped: a second, not the
    twenty a whole check takes."""
    from mypy import api

    user = tmp_path / "user.py"
    user.write_text(
        "import agentflow\n"
        "import agentflow.report\n"
        "from agentflow import Fleeet\n"
        "from agentflow.report import LivView\n"
        "agentflow.Flet\n"
        "from agentflow import ChatRequest, plan_kv_cache\n"  # moved names: still typed
        "agentflow.plan_kv_cache\n"
    )
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    out, err, status = api.run(
        [
            *("--config-file", str(tmp_path / "mypy.ini")),
            *("--cache-dir", str(tmp_path / "cache")),
            *("--strict", "--follow-imports=skip"),
            str(user),
            str(ROOT / "agentflow" / "__init__.py"),
            str(ROOT / "agentflow" / "report" / "__init__.py"),
        ]
    )
    assert status == 1, out + err
    errors = sorted(line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line)
    assert all(line.startswith(str(user)) for line in out.splitlines() if ": error: " in line), out
    assert [e.split(";")[0].split("  [")[0] for e in errors] == [
        'Module "agentflow" has no attribute "Fleeet"',
        'Module "agentflow.report" has no attribute "LivView"',
        'Module has no attribute "Flet"',
    ], out


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_exported_classes_report_their_public_module(namespace: str) -> None:
    """`repr(agentflow.Fleet)` names `agentflow.Fleet`, not `agentflow._fleet.Fleet`; a
    subpackage's classes report the subpackage. Annotations still resolve (msgspec and
    `typing.get_type_hints` evaluate them in `__module__`'s namespace)."""
    module = importlib.import_module(namespace)
    # These name a type imported only under TYPE_CHECKING (pydantic; the typing
    # module's Complete; Event; the simulator's Profile, which `import agentflow.bench`
    # does not load): get_type_hints failed for the first three before too.
    unresolvable = {"Tool", "OverflowView", "BenchConfig", "SimTarget"}
    classes = 0
    for name in module.__all__:
        value = getattr(module, name)
        if not isinstance(value, type) or not value.__module__.startswith("agentflow"):
            continue
        classes += 1
        top = name in agentflow.__all__ and namespace != "agentflow.typing"
        assert value.__module__ == ("agentflow" if top else namespace), name
        if name not in unresolvable:
            typing.get_type_hints(value)
    assert classes > 0


#: The exception tree's modules (``_errors.py`` re-exports the other two's classes).
ERRORS = ("agentflow._errors", "agentflow._errors_base", "agentflow._errors_transport")


def test_import_agentflow_loads_only_the_exceptions() -> None:
    """`import agentflow` loads the package, its exceptions and version, nothing else of
    agentflow (it loaded 109 agentflow modules, 427 in all, before the surface was made
    lazy); the first use of a name loads the runtime, but not bench, stats or store."""
    assert _agentflow_modules("import agentflow") == [
        "agentflow",
        *ERRORS,
        "agentflow._public",
        "agentflow._redact",
        "agentflow._version",
    ]
    used = _agentflow_modules("import agentflow\nagentflow.Fleet")
    assert "agentflow._fleet" in used and "agentflow.sched" in used
    assert not {m.split(".")[1] for m in used if m.count(".")} & {"bench", "stats", "store"}


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """The agentflow modules ``path`` imports at run time, and under TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    runtime: set[str] = set()
    typing_only: set[str] = set()
    checking = [n for n in ast.walk(tree) if isinstance(n, ast.If)]
    checking = [n for n in checking if "TYPE_CHECKING" in ast.unparse(n.test)]
    guarded = {id(m) for n in checking for m in ast.walk(n)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentflow"):
            (typing_only if id(node) in guarded else runtime).add(node.module)
        elif isinstance(node, ast.Import):
            names = {a.name for a in node.names if a.name.startswith("agentflow")}
            (typing_only if id(node) in guarded else runtime).update(names)
    return runtime, typing_only


# The layers below the events module: plain data and logging, no policy, no I/O.
BELOW_EVENTS = {
    "agentflow._callables",
    "agentflow._context_events",
    "agentflow._logging",
    "agentflow._metrics",
    "agentflow._redact",
    "agentflow._trace",
    "agentflow.typing",
}


def test_typing_imports_nothing_of_the_package() -> None:
    """typing.py imports nothing of agentflow at run time, and only plain data types
    (the request, the trace, the events) for type checking; importing it loads nothing
    but the package's own light top."""
    runtime, typing_only = _imports(ROOT / "agentflow" / "typing.py")
    assert runtime == set()
    assert typing_only == {"agentflow._events", "agentflow._request", "agentflow._trace"}
    assert set(_agentflow_modules("import agentflow.typing")) == {
        "agentflow",
        *ERRORS,
        "agentflow._public",
        "agentflow._redact",
        "agentflow._version",
        "agentflow.typing",
    }


def test_the_events_module_imports_nothing_above_it() -> None:
    """The events module imports only the layers below it (no context, scheduler,
    transport, session or fleet), and the event bus only those and the events; the
    context seam's events live in _context_events.py, which imports only the trace. Old
    paths still work."""
    runtime, _ = _imports(ROOT / "agentflow" / "_events.py")
    assert runtime <= BELOW_EVENTS
    bus, _ = _imports(ROOT / "agentflow" / "_event_bus.py")
    assert bus <= BELOW_EVENTS | {"agentflow._events", "agentflow._callback_failures"}
    books, _ = _imports(ROOT / "agentflow" / "_callback_failures.py")  # (the bus's)
    assert books <= BELOW_EVENTS | {"agentflow._events"}
    assert _imports(ROOT / "agentflow" / "_context_events.py")[0] == {"agentflow._trace"}
    assert _imports(ROOT / "agentflow" / "_request.py")[0] == {"agentflow._redact"}
    loaded = set(_agentflow_modules("import agentflow._events"))
    allowed = (
        BELOW_EVENTS
        | set(ERRORS)
        | {
            "agentflow",
            "agentflow._events",
            "agentflow._public",
            "agentflow._version",
        }
    )
    assert loaded <= allowed, loaded - allowed
    from agentflow._context_events import BudgetEvent
    from agentflow._request import ChatRequest
    from agentflow.context import BudgetEvent as Public
    from agentflow.context._events import BudgetEvent as Old
    from agentflow.transport import ChatRequest as PublicRequest
    from agentflow.transport._request import ChatRequest as OldRequest

    assert BudgetEvent is Public is Old
    assert ChatRequest is PublicRequest is OldRequest


def test_version_is_in_its_own_module_and_nothing_imports_it_upward() -> None:
    """`agentflow.__version__` comes from _version.py, which matches pyproject.toml, and no
    module inside the package imports it from `agentflow` itself."""
    from agentflow._version import __version__

    assert agentflow.__version__ == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject
    upward = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "agentflow").rglob("*.py")
        if re.search(r"^\s*from agentflow import", p.read_text(), re.M)
    ]
    assert upward == []


def test_objects_of_public_classes_pickle_across_processes() -> None:
    """Pickles name classes by their public path; a fresh interpreter resolves them
    (through the lazy top level) to equal objects."""
    import pickle

    from agentflow import ConfigError, Limits, RetryPolicy, Timeouts
    from agentflow.sched import FCFS

    objects = [Limits(rpm=5.0), RetryPolicy(), Timeouts(total=30.0), FCFS()]
    data = pickle.dumps(objects)
    assert b"agentflow._" not in data and b"agentflow.sched._" not in data
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pickle, sys; o = pickle.loads(sys.stdin.buffer.read()); "
            "print([type(x).__module__ + '.' + type(x).__qualname__ for x in o]); print(o[0])",
        ],
        input=data,
        capture_output=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout.decode()
    names, first = out.splitlines()
    assert ast.literal_eval(names) == [
        "agentflow.Limits",
        "agentflow.RetryPolicy",
        "agentflow.Timeouts",
        "agentflow.sched.FCFS",
    ]
    assert first == repr(Limits(rpm=5.0))
    assert str(pickle.loads(pickle.dumps(ConfigError("bad x")))) == "bad x"
