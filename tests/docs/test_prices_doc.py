"""Every ``Prices(...)`` docs/context.md shows is a call that works: ``Prices`` is
keyword-only, and the page showed ``Prices(prompt, output, cached=None)``, which is a
TypeError. A placeholder (a name or ``...``) stands for a number."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agentflow.context import Prices

PAGE = (Path(__file__).parents[2] / "docs" / "context.md").read_text()


def _number(node: ast.expr) -> ast.expr:
    """A placeholder (a name, ``...``) as a number; anything else as written."""
    if isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and node.value is ...):
        return ast.Constant(1.0)
    return node


def test_every_prices_call_shown_works() -> None:
    shown = re.findall(r"\bPrices\([^()]*\)", PAGE)
    assert len(shown) >= 2, shown
    for text in shown:
        call = ast.parse(text, mode="eval").body
        assert isinstance(call, ast.Call), text
        call.args = [_number(a) for a in call.args]
        for keyword in call.keywords:
            keyword.value = _number(keyword.value)
        code = compile(ast.fix_missing_locations(ast.Expression(call)), "<docs>", "eval")
        assert isinstance(eval(code, {"Prices": Prices}), Prices), text
