"""Each ``Raises:`` entry of a public name's docstring is an exception: an argument
written after the ``Raises:`` block (``Endpoint``'s ``name:``) was listed in the API
reference as an exception named ``name``, and missing from the arguments."""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
import sys
from pathlib import Path

import griffe

from agentflow.transport import Endpoint

ROOT = Path(__file__).parents[2]


def _sections(obj: object) -> dict[str, list[griffe.DocstringSection]]:
    doc = inspect.getdoc(obj) or ""
    parsed = griffe.Docstring(doc, parser="google").parse(warnings=False)
    by_kind: dict[str, list[griffe.DocstringSection]] = {}
    for section in parsed:
        by_kind.setdefault(section.kind.value, []).append(section)
    return by_kind


def _is_exception(name: str) -> bool:
    """Whether ``name`` is an exception class of a loaded agentflow module or a builtin
    (else, whether it is named as one)."""
    leaf = name.rpartition(".")[2]
    homes = [m for k, m in sys.modules.items() if k.split(".")[0] == "agentflow"]
    for where in (*homes, builtins):
        found = getattr(where, leaf, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return True
    return re.search(r"(Error|Exception|Timeout|Interrupted)$", leaf) is not None


def test_every_raises_entry_of_a_public_name_is_an_exception() -> None:
    wrong = []
    for page in (ROOT / "docs" / "api").glob("*.md"):
        (namespace,) = re.findall(r"^::: (\S+)$", page.read_text(), re.M)
        module = importlib.import_module(namespace)
        for name in module.__all__:
            obj = getattr(module, name)
            members = [obj]
            if inspect.isclass(obj):
                members += [m for k, m in vars(obj).items() if not k.startswith("_")]
            for member in members:
                if not (inspect.isclass(member) or callable(member)):
                    continue
                for section in _sections(member).get("raises", []):
                    for item in section.value:
                        if not _is_exception(str(item.annotation)):
                            wrong.append(f"{namespace}.{name}: {item.annotation}")
    assert wrong == [], "\n".join(wrong)


def test_endpoints_name_is_among_its_arguments() -> None:
    (args,) = _sections(Endpoint)["parameters"]
    assert [a.name for a in args.value] == ["base_url", "api_key", "headers", "extra_body", "name"]
