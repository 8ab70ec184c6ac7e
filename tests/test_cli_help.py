"""Every option of every `agentflow` command says what it does; the top-level help says
what agentflow is; pyproject names only commands that exist."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

from agentflow.cli import _parser

ROOT = Path(__file__).parent.parent


def _walk(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _walk(sub, f"{path} {name}")
    return found


def test_every_option_and_command_has_help() -> None:
    """Each argument (positional or option) of each command, and each command itself,
    has a help text."""
    parsers = _walk(_parser(), "agentflow")
    assert {p for p, _ in parsers} >= {
        "agentflow", "agentflow demo", "agentflow chat", "agentflow llamacpp", "agentflow sim",
    }  # fmt: skip
    missing = []
    for path, parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                missing += [
                    f"{path} {c.dest}" for c in action._choices_actions if not c.help
                ]  # each command's one-line help
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_top_level_help_says_what_agentflow_is() -> None:
    """`agentflow --help` opens with what the tool is for, not only the word "command"."""
    out = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "--help"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    text = " ".join(out.split())
    assert "runs fleets of streaming, tool-calling LLM agents" in text
    assert "servers (vLLM, SGLang, llama.cpp, hosted APIs)" in text


def test_llamacpp_help_names_slots_and_tool_calls() -> None:
    """The llama.cpp command says the model never calls tools and what slots are."""
    parser = dict(_walk(_parser(), "agentflow"))["agentflow llamacpp"]
    text = " ".join(parser.format_help().split())
    assert "never calls tools" in text
    assert "4 by default" in text and "max_concurrency ≤ SLOTS" in text


def test_pyproject_names_only_existing_commands() -> None:
    """Every console script points at a callable that exists, and every
    `agentflow SUBCOMMAND` that pyproject's comments mention is a real subcommand."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for name, target in project["project"]["scripts"].items():
        module, _, attr = target.partition(":")
        mod = __import__(module, fromlist=[attr])
        assert callable(getattr(mod, attr)), name
    commands = {
        name
        for _, p in _walk(_parser(), "agentflow")[:1]
        for a in p._actions
        if isinstance(a, argparse._SubParsersAction)
        for name in a.choices
    }
    text = (ROOT / "pyproject.toml").read_text()
    import re

    mentioned = re.findall(r"`agentflow (\w+)", text)
    assert mentioned and set(mentioned) <= commands
    flags = re.findall(r"`agentflow \w+ (--[\w-]+)", text)
    for flag in flags:  # e.g. no `agentflow demo --llamacpp`
        assert any(flag in p.format_help() for _, p in _walk(_parser(), "agentflow")), flag


def _without_rich(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``agentflow <argv>`` in a process where rich (the ``demo`` extra) cannot be found."""
    code = (
        "import sys; sys.modules['rich'] = None\n"
        "import importlib.util as u; real = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'rich' else real(n, *a)\n"
        f"from agentflow.cli import main; sys.exit(main({argv!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_demo_without_rich_says_how_to_install_it() -> None:
    """With rich missing (the `demo` extra), `agentflow demo` exits 2 with one line that
    names the extra to install."""
    proc = _without_rich(["demo", "--no-live"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "agentflow demo: error: demo needs rich (its live view), which is not installed: "
        "pip install 'agentflow[demo]'"
    )


def test_the_docs_tie_the_demo_extra_to_every_command_that_needs_rich() -> None:
    """`agentflow bench` needs rich too (its tables: exit 2 naming the `demo` extra when it
    is missing), but README.md and docs/index.md named the extra for `agentflow demo`
    only: each place that says what the extra is for names both commands."""
    proc = _without_rich(["bench"])
    assert proc.returncode == 2
    assert "bench needs rich" in proc.stderr and "agentflow[demo]" in proc.stderr
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`demo` (rich, for `agentflow demo` and `agentflow bench`;" in readme
    index = (ROOT / "docs" / "index.md").read_text()
    (line,) = [x for x in index.splitlines() if "pip install 'agentflow[demo]'" in x]
    assert "`agentflow demo`" in line and "`agentflow bench`" in line
    bench = (ROOT / "docs" / "bench.md").read_text()
    assert "it needs the `demo` extra (`pip install 'agentflow[demo]'`)" in bench
