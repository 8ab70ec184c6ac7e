"""Fixtures shared by the context tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .hf_tokenizer import train


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real BPE tokenizer.json (see :mod:`tests.context.hf_tokenizer`)."""
    pytest.importorskip("tokenizers")
    return train(tmp_path_factory.mktemp("tok") / "tokenizer.json")
