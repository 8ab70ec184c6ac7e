"""The API reference renders every public name: each name in a namespace's ``__all__``
has its entry (an anchor ``id="<namespace>.<name>"``) on that namespace's API page.

Module-level constants and type aliases (``MAX_PRIORITY``, ``SessionStatus``,
``agentflow.typing.Callback``, ``__version__``…) are documented with ``#:`` comments,
which griffe does not read: without ``show_if_no_docstring`` (and a filter that lets
``__version__`` through ``!^_``), mkdocstrings left every one of them out.

This builds the API pages alone, with the site's own mkdocstrings options (the whole
site, ``--strict``, is built by scripts/check).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]

pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")


def _api_config(tmp_path: Path) -> Path:
    yaml: Any = importlib.import_module("yaml")  # (mkdocs's; no type stubs here)
    site: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugins = site["plugins"]
    (docstrings,) = [p["mkdocstrings"] for p in plugins if isinstance(p, dict)]
    docstrings["handlers"]["python"]["paths"] = [str(ROOT)]
    config = {
        "site_name": "api",
        "docs_dir": str(ROOT / "docs" / "api"),
        "site_dir": str(tmp_path / "site"),
        "theme": site["theme"],
        "markdown_extensions": site["markdown_extensions"],
        "plugins": [{"mkdocstrings": docstrings}],
        # The API pages link to the topic pages, which are not built here.
        "validation": {"links": {"not_found": "ignore", "unrecognized_links": "ignore"}},
    }
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_every_public_name_has_its_entry_in_the_api_reference(tmp_path: Path) -> None:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    build(load_config(str(_api_config(tmp_path))))
    missing = {}
    for page in (ROOT / "docs" / "api").glob("*.md"):
        (namespace,) = re.findall(r"^::: (\S+)$", page.read_text(), re.M)
        html = (tmp_path / "site" / page.stem / "index.html").read_text()
        ids = set(re.findall(rf'id="{re.escape(namespace)}\.(\w+)"', html))
        module = importlib.import_module(namespace)
        left_out = [n for n in module.__all__ if n not in ids]
        if left_out:
            missing[namespace] = left_out
    assert missing == {}
