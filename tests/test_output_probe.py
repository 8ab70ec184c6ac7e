"""The up-front check of an output file makes, and removes, the very temporary file the
writing will make: a probe named 2 characters longer refused names of 236–237 characters
that the writing takes, and a Ctrl-C between making and removing it left it behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentflow._cliargs import check_output_file
from agentflow._files import open_text_output


def test_the_longest_name_the_writing_takes_passes_the_check(tmp_path: Path) -> None:
    most = os.pathconf(tmp_path, "PC_NAME_MAX") - len(".") - len(".0123456789ab.tmp")
    for n in (most - 1, most):
        path = tmp_path / ("r" * (n - len(".json")) + ".json")
        check_output_file(path, "--report")
        with open_text_output(path) as f:
            f.write("{}")
        assert path.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_interrupt_while_probing_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = Path.open

    def interrupted(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode == "xb":  # made, then Ctrl-C before it is removed
            real_open(self, mode, *args, **kwargs).close()
            raise KeyboardInterrupt
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        check_output_file(tmp_path / "run.json", "--report")
    assert list(tmp_path.iterdir()) == []
