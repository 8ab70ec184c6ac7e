"""OpenAI's o200k models map to o200k_base whatever the installed tiktoken knows.

The docstring of ``encoding_name_for_model`` promised o200k_base for o1 and gpt-4.1, but
only gpt-oss was in agentflow's own table: with tiktoken 0.7 (which pyproject allows, and
which knows only gpt-4o) o1, o3-mini, gpt-4.1, o4-mini and gpt-5 came out cl100k_base and
were counted with the wrong encoding. Here tiktoken's tables are emptied, so the mapping
is agentflow's alone.
"""

from __future__ import annotations

import pytest

from agentflow.context._encodings import encoding_name_for_model

O200K = [
    "gpt-4o", "gpt-4o-mini", "chatgpt-4o-latest", "ft:gpt-4o-2024-08-06:org::abc",
    "o1", "o1-mini", "o1-preview", "o3", "o3-mini", "o4-mini", "o4-mini-2025-04-16",
    "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-4.5-preview",
    "gpt-5", "gpt-5-mini", "gpt-5.1", "gpt-oss-20b", "openai/gpt-4.1", "azure/o3-mini",
]  # fmt: skip


@pytest.fixture
def bare_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiktoken that knows no model at all (0.7 knew only gpt-4o, 0.14 knows these)."""
    import tiktoken.model

    monkeypatch.setattr(tiktoken.model, "MODEL_TO_ENCODING", {})
    monkeypatch.setattr(tiktoken.model, "MODEL_PREFIX_TO_ENCODING", {})


@pytest.mark.usefixtures("bare_tiktoken")
@pytest.mark.parametrize("model", O200K)
def test_o200k_models_without_tiktoken_knowing_them(model: str) -> None:
    assert encoding_name_for_model(model) == "o200k_base"


@pytest.mark.usefixtures("bare_tiktoken")
@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "o10", "gpt-40"])
def test_the_rest_goes_by_tiktoken(model: str) -> None:
    assert encoding_name_for_model(model) == "cl100k_base"  # tiktoken knows none: the default
