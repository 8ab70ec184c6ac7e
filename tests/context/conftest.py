"""Fixtures shared by the context tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow.context._encodings import encoding

from .hf_tokenizer import train, train_byte_level


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real BPE tokenizer.json (see :mod:`tests.context.hf_tokenizer`)."""
    pytest.importorskip("tokenizers")
    return train(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="session")
def byte_level_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE tokenizer.json with special tokens (see
    :func:`tests.context.hf_tokenizer.train_byte_level`)."""
    pytest.importorskip("tokenizers")
    return train_byte_level(tmp_path_factory.mktemp("bytes") / "tokenizer.json")


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the shared ``cl100k_base`` encoding tokenizes from now on (counters
    built after this fixture see the wrapper: they look the method up when built)."""
    enc = encoding("cl100k_base")
    original = enc.encode_ordinary
    texts: list[str] = []

    def counting(text: str) -> list[int]:
        texts.append(text)
        return original(text)

    monkeypatch.setattr(enc, "encode_ordinary", counting)
    return texts


@pytest.fixture
def handed(encoded: list[str]) -> list[str]:
    """What tiktoken is handed: :func:`encoded` under the name the truncation tests use."""
    return encoded
