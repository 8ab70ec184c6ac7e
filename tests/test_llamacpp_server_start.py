"""``LlamaCppServer.start()``: what it refuses before starting a child, and starting again
after its server died."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow import ConfigError
from agentflow.llamacpp import LlamaCppServer


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_model_that_is_not_a_file_is_a_config_error_before_any_child(
    tmp_path: Path, where: str
) -> None:
    """A model path that is no file is the caller's mistake, a ConfigError naming it as the
    docstring promises: it used to start a child that exited at start (ServerStartError)."""
    model = tmp_path / "x.gguf" if where == "missing" else tmp_path
    server = LlamaCppServer(model=model)
    with pytest.raises(ConfigError, match=r"LlamaCppServer\.model") as info:
        server.start()
    assert str(model) in str(info.value)
    assert server._child is None  # nothing was started
