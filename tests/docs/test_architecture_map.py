"""docs/architecture.md's map says what the code does: which modules the wire imports,
who imports the CLI's ``_cli_*.py`` modules, how many names the top level has, and a
place in the map for every module of the package's top and of the transport.

Read from the source (the imports an AST holds), not from a run: a claim about the
imports fails here when the code moves under it.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import agentflow
from tests.test_public_surface import _imports

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "agentflow"
ARCH = (ROOT / "docs" / "architecture.md").read_text()


def _bullet(start: str) -> str:
    """The bullet of "Which way imports run" that begins with ``start``."""
    section = ARCH.split("## Which way imports run\n", 1)[1].split("\n## ", 1)[0]
    bullet = section.split(f"- {start}", 1)[1]
    return bullet.split("\n- ", 1)[0]


@functools.cache
def _all_imports() -> dict[str, set[str]]:
    """Every file of the package (relative path) → the agentflow modules it imports."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        runtime, typing_only = _imports(path)
        out[path.relative_to(PACKAGE).as_posix()] = runtime | typing_only
    return out


def _importers(module: str) -> set[str]:
    """The package's files that import ``module``, at run time or not."""
    return {path for path, modules in _all_imports().items() if module in modules}


def test_the_wires_import_list() -> None:
    """ "It imports only ...": exactly the modules outside agentflow.transport that its
    files import at run time."""
    bullet = _bullet("The wire (`agentflow/transport/`)")
    listed = bullet.split("It imports only", 1)[1].split("tests/", 1)[0]
    # Each list item is the first backticked name after a comma (or "and"); what the
    # parentheses say of it may name other modules, so drop them first.
    items = re.sub(r"\([^()]*\)", "", listed)
    stated = {f"agentflow.{name}" for name in re.findall(r"`([a-z_]+)`", items)}
    actual: set[str] = set()
    for path in (PACKAGE / "transport").glob("*.py"):
        runtime, _ = _imports(path)
        actual |= {m for m in runtime if not m.startswith("agentflow.transport")}
    assert stated == actual, (
        f"listed, not imported: {stated - actual}; not listed: {actual - stated}"
    )


def test_who_imports_the_cli_modules() -> None:
    """cli.py's own modules are imported only by it and each other; the shared two by the
    commands the map names, and those alone besides."""
    own = ("_cli_demo", "_cli_chat", "_cli_llamacpp", "_cli_timeouts")
    for name in own:
        for path in _importers(f"agentflow.{name}"):
            assert path == "cli.py" or path.startswith("_cli_"), (name, path)
    bullet = _bullet("Nothing imports `cli.py`.")
    named = set(re.findall(r"`([a-z_/]+\.py)`", bullet.split("serve every command:", 1)[1]))
    shared = _importers("agentflow._cli_signals") | _importers("agentflow._cli_console")
    others = {p for p in shared if p != "cli.py" and not p.startswith("_cli_")}
    assert others == named
    assert not _importers("agentflow.cli")


def test_the_top_levels_count() -> None:
    stated = re.search(r"\((\d+) names, `agentflow.__all__`", ARCH)
    assert stated is not None and int(stated.group(1)) == len(agentflow.__all__)


def test_every_top_and_transport_module_is_on_the_map() -> None:
    """Each is named by its file name (``_trace.py``, not the bare word another package's
    module may share), a top-level one not as another package's (``bench/_trace.py``), and
    a transport one whose name another module has by its path (``transport/_request.py``)."""
    everywhere = Counter(p.name for p in PACKAGE.rglob("*.py"))
    missing = []
    for p in [*PACKAGE.glob("*.py"), *(PACKAGE / "transport").glob("*.py")]:
        if p.stem == "__init__":
            continue
        name = re.escape(p.name)
        if p.parent == PACKAGE:
            pattern = rf"(?<![\w./]){name}\b"
        elif everywhere[p.name] > 1:
            pattern = rf"transport/{name}\b"
        else:
            pattern = rf"(?<![\w.]){name}\b"
        if not re.search(pattern, ARCH):
            missing.append(p.relative_to(PACKAGE).as_posix())
    assert not missing
