"""The docs site's configuration: every page is in the nav, every public namespace has an
API page, and the hook that cleans Sphinx roles out of rendered docstrings works.

The build itself (`mkdocs build --strict`: broken links and anchors fail it) runs in
scripts/check after the tests.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import agentflow

ROOT = Path(__file__).parents[2]
CONFIG = (ROOT / "mkdocs.yml").read_text()
NAV = set(re.findall(r":\s*(\S+\.md)\s*$", CONFIG, re.M))


def test_every_docs_page_is_in_the_nav() -> None:
    """No page of docs/ is left out of the site's navigation, and none listed is missing."""
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == NAV


def test_every_public_namespace_has_an_api_page() -> None:
    """Each public subpackage of agentflow (and the public modules typing, testing and
    llamacpp) has an API page rendering it with mkdocstrings."""
    namespaces = {"agentflow", "agentflow.typing", "agentflow.testing", "agentflow.llamacpp"}
    namespaces |= {
        f"agentflow.{m.name}"
        for m in pkgutil.iter_modules(agentflow.__path__)
        if m.ispkg and not m.name.startswith("_") and m.name != "demo"  # demo: a command
    }
    rendered = {
        m
        for page in (ROOT / "docs" / "api").glob("*.md")
        for m in re.findall(r"^::: (\S+)$", page.read_text(), re.M)
    }
    assert rendered == namespaces
    for name in rendered:
        importlib.import_module(name)


def test_hook_turns_roles_into_code() -> None:
    """`:class:`, `:meth:` with `~` and a closing `::` become what Sphinx would show."""
    import sys

    sys.path.insert(0, str(ROOT))
    try:
        from mkdocs_hooks import on_page_content
    finally:
        sys.path.remove(str(ROOT))
    html = (
        "<p>see :class:<code>Fleet</code> and :meth:<code>~agentflow.Fleet.run</code> "
        "and :func:<code>agentflow.testing.capture_events</code>::</p>"
    )
    assert on_page_content(html) == (
        "<p>see <code>Fleet</code> and <code>run</code> "
        "and <code>agentflow.testing.capture_events</code>:</p>"
    )
