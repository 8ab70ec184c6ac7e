"""One real llama.cpp server (SmolLM2-135M-Instruct, CPU) for the whole test session,
shared by the integration and context tests that are marked ``llamacpp``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentflow.llamacpp import LlamaCppServer


@pytest.fixture(scope="session")
def llamacpp() -> Iterator[LlamaCppServer]:
    """Start the server once, wait for /health, stop it at the end."""
    with LlamaCppServer(n_ctx=8192, n_parallel=4, threads=2) as server:
        yield server
