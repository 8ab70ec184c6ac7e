"""The exception tree is whole where it is drawn: the tree in ``agentflow/_errors.py``'s
docstring and docs/guide.md's "Errors" section name every exception agentflow exports,
and the tree says where a 408 goes (a plain APIStatusError, not a BadRequestError)."""

from __future__ import annotations

import re
from pathlib import Path

import agentflow
import agentflow._errors
from agentflow import APIStatusError, BadRequestError
from agentflow.transport._status import api_status_error

GUIDE = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()

EXCEPTIONS = sorted(
    name
    for name in agentflow.__all__
    if isinstance(getattr(agentflow, name), type)
    and issubclass(getattr(agentflow, name), agentflow.AgentflowError)
)


def test_the_guide_names_every_exception() -> None:
    section = GUIDE.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([A-Za-z]+)`", section))
    assert [name for name in EXCEPTIONS if name not in named] == []


def test_the_docstring_tree_names_every_exception_and_the_408() -> None:
    tree = agentflow._errors.__doc__ or ""
    drawn = set(re.findall(r"(?:── |^    )([A-Z][A-Za-z]+)\b", tree, re.MULTILINE))
    assert [name for name in EXCEPTIONS if name not in drawn] == []
    line = next(x for x in tree.splitlines() if "── BadRequestError" in x)
    assert "408" in line
    error = api_status_error(408, None, "http://h/v1", lead="x")
    assert type(error) is APIStatusError and not isinstance(error, BadRequestError)
