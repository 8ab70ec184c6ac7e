"""Every flag of ``agentflow chat``, ``llamacpp``, ``sim``, ``demo``, ``bench`` and ``trace``
is named in the command's own docs (a flag of the same name on another command's page does
not count): chat's ``--system``/``--temperature``, llamacpp's ``--n-ctx``, eight of sim's
and trace's ``--output``/``--format`` were in ``--help`` only. And ``demo --help`` gives
each flag's default (``--turns``, ``--seed`` and ``--profile`` gave none)."""

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


#: Where each command is documented.
DOCS = {
    "chat": "README.md",
    "llamacpp": "README.md",
    "sim": "docs/simulator.md",
    "demo": "docs/demo.md",
    "bench": "docs/bench.md",
    "trace": "docs/traces.md",
}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """``parser``'s long flags, its subcommands' included."""
    flags = set()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                flags |= _flags(sub)
        flags |= {o for o in a.option_strings if o.startswith("--") and o != "--help"}
    return flags


@pytest.mark.parametrize("command", sorted(DOCS))
def test_every_flag_is_in_the_commands_docs(command: str) -> None:
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", (ROOT / DOCS[command]).read_text()))
    assert sorted(_flags(_subparser(command)) - named) == []


def test_demo_help_gives_the_defaults() -> None:
    helps = {
        a.option_strings[-1]: a.help or "" for a in _subparser("demo")._actions if a.option_strings
    }
    assert "default 5:20" in helps["--turns"]
    assert "default 0" in helps["--seed"]
    assert "default deepseek-v4.1-flash-gb300" in helps["--profile"]
