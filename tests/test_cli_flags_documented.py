"""Every flag of ``agentflow chat``, ``llamacpp``, ``sim`` and ``demo`` is named in the docs
(README.md or docs/*.md): chat's ``--system``/``--temperature``, llamacpp's ``--n-ctx`` and
eight of sim's were in ``--help`` only. And ``demo --help`` gives each flag's default
(``--turns``, ``--seed`` and ``--profile`` gave none)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from agentflow.cli import _parser

ROOT = Path(__file__).resolve().parents[1]


def _subparser(name: str) -> argparse.ArgumentParser:
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[name]
            assert isinstance(sub, argparse.ArgumentParser)
            return sub
    raise AssertionError(name)


def _docs() -> str:
    return "\n".join(
        p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )


@pytest.mark.parametrize("command", ["chat", "llamacpp", "sim", "demo", "bench"])
def test_every_flag_is_in_the_docs(command: str) -> None:
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _docs()))
    flags = {
        o
        for a in _subparser(command)._actions
        for o in a.option_strings
        if o.startswith("--") and o != "--help"
    }
    assert sorted(flags - named) == []


def test_demo_help_gives_the_defaults() -> None:
    helps = {
        a.option_strings[-1]: a.help or "" for a in _subparser("demo")._actions if a.option_strings
    }
    assert "default 5:20" in helps["--turns"]
    assert "default 0" in helps["--seed"]
    assert "default deepseek-v4.1-flash-gb300" in helps["--profile"]
