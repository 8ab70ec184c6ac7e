"""Every flag of ``agentflow plan`` is named in docs/planner.md's command-line section:
``--gpu-visible-gib``, which the Assumptions recommend, was missing from it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentflow.planner.cli import add_parser

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text()


def _section(title: str) -> str:
    start = PAGE.index(f"\n## {title}\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start : end if end >= 0 else len(PAGE)]


def test_every_flag_is_in_the_command_line_section() -> None:
    parser = add_parser(argparse.ArgumentParser(prog="agentflow").add_subparsers())
    flags = {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _section("The command line")))
    assert sorted(flags - named) == []
