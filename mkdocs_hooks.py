"""mkdocs hooks for the docs site (mkdocs.yml ``hooks:``).

agentflow's docstrings are written for both ``help()`` and Sphinx-style readers: they
name other objects with roles (``:class:`Fleet```, ``:meth:`~agentflow.Fleet.run```) and
end a paragraph before a code block with ``::``. mkdocstrings renders Google-style
sections but leaves those markers as text; this hook turns them into plain code spans
(``~`` keeps the last dotted component, as Sphinx shows it) and ``::`` into ``:``.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:class|func|meth|data|attr|mod|exc|obj|const|py:\w+):<code>(~?)([^<]*)</code>"
)
_LITERAL = re.compile(r"::(</p>)")


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """Rewrite Sphinx roles and ``::`` markers in a page's rendered HTML."""
    return _LITERAL.sub(r":\1", _ROLE.sub(_code, html))
