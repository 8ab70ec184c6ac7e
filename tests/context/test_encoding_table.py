"""The model → encoding table does not depend on what the installed tiktoken knows."""

from __future__ import annotations

import pytest

from agentflow.context._encodings import encoding_name_for_model


def test_gpt_oss_is_o200k_with_a_tiktoken_that_predates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pyproject allows tiktoken 0.7, whose tables have no gpt-oss: the mapping came out
    # cl100k_base there. agentflow maps it itself.
    import tiktoken.model

    monkeypatch.delitem(tiktoken.model.MODEL_PREFIX_TO_ENCODING, "gpt-oss-", raising=False)
    assert encoding_name_for_model("gpt-oss-120b") == "o200k_base"
    assert encoding_name_for_model("openai/gpt-oss-20b") == "o200k_base"
    assert encoding_name_for_model("gpt-4") == "cl100k_base"  # the rest is still tiktoken's
