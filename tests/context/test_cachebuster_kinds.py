"""Which volatile kind a differing span is: numbers in exponent notation are counters,
URL-safe base64 tokens (with '-') are nonces, and hyphenated runs of words and numbers
(model names) or UUIDs are not taken for nonces."""

from __future__ import annotations

import base64
import random
import uuid

import pytest

from agentflow.context import CacheBusterCheck, CacheBusterWarning


def bust(a: str, b: str) -> list[CacheBusterWarning]:
    check = CacheBusterCheck()
    convo = [{"role": "user", "content": "x"}]
    assert check.check("s1", "ag", [{"role": "system", "content": a}, *convo], []) == []
    return check.check("s2", "ag", [{"role": "system", "content": b}, *convo], [])


@pytest.mark.parametrize(
    ("first", "second", "snippet"),
    [
        ("lr=1e-05 ok", "lr=0.00001 ok", "0.00001"),
        ("lr=0.00001 ok", "lr=1e-05 ok", "1e-05"),
        ("lr=1e-05 ok", "lr=1E-5 ok", "1E-5"),
        ("big=1e+20 ok", "big=100000000000000000000.0 ok", "100000000000000000000.0"),
    ],
)
def test_numbers_in_exponent_notation_are_counters(first: str, second: str, snippet: str) -> None:
    [w] = bust(first, second)
    assert (w.kind, w.snippet) == ("counter", snippet)


def test_url_safe_tokens_are_nonces_whole() -> None:
    a, b = "Xk3-9fQzLp2_aR7vTq1mWb", "7Hd0p-LmQ2zR8sVk4Tn1Yc"
    [w] = bust(f"Nonce: {a} ok", f"Nonce: {b} ok")
    assert (w.kind, w.snippet, w.reference_snippet) == ("nonce", b, a)
    rng = random.Random(7)

    def token() -> str:  # as secrets.token_urlsafe(16) makes them
        return base64.urlsafe_b64encode(rng.randbytes(16)).rstrip(b"=").decode()

    pairs = [(token(), token()) for _ in range(200)]
    assert sum("-" in a or "-" in b for a, b in pairs) > 50
    reported = sum(bool(bust(f"Nonce: {a} ok", f"Nonce: {b} ok")) for a, b in pairs)
    # Before, only ~55% were (a token split at its "-" into pieces too short to be one);
    # a token with no digit in it is not taken for one (it could be a CamelCase word).
    assert reported >= 180


# Hyphenated model, package and identifier names (Hugging Face model ids and the like), in
# pairs that differ for real. Before, half of them were taken whole for nonces (a digit and
# a lower-case letter before an upper-case one were enough): another model was a "nonce".
NAMES = """
DeepSeek-R1-Distill-Llama-70B DeepSeek-R1-Distill-Qwen-32B
OpenHermes-2-Mistral-7B-GPTQ OpenHermes-2-Mixtral-8x7B-AWQ
useEffect-cleanup-hook-v2 useEffect-cleanup-hook-v3
Meta-Llama-3-8B-Instruct Meta-Llama-3-70B-Instruct
Mixtral-8x7B-Instruct-v0 Mixtral-8x22B-Instruct-v0
Qwen2-VL-72B-Instruct-GPTQ-Int4 Qwen2-VL-7B-Instruct-AWQ
Phi-3-mini-4k-instruct Phi-3-medium-128k-instruct
gte-Qwen2-7B-instruct CodeLlama-34b-Instruct-hf
CodeLlama-13b-Python-hf WizardCoder-Python-34B-V1
Nous-Hermes-2-Mixtral-8x7B-DPO Nous-Hermes-2-Mixtral-8x7B-SFT
StarCoder2-15B-Instruct-v0 Mistral-Nemo-Instruct-2407
Falcon-40B-Instruct-GPTQ Yi-34B-Chat-4bits
DeepSeek-Coder-V2-Lite-Instruct OLMo-2-1124-7B-Instruct
MiniCPM-Llama3-V-2_5-int4 InternVL2_5-8B-MPO-AWQ
Llama-2-13b-chat-GPTQ Qwen2-57B-A14B-Instruct
Mixtral-8x7B-v0_1-GPTQ-4bit-32g getServerSideProps-v2-fallback
useQueryClient-v5-migration aarch64-apple-darwin-macOS14
Phi-3_5-MoE-instruct-4bit-AWQ gemma-2-27b-it-GPTQ-4bit
SmolLM2-360M-Instruct-Q8 e5-mistral-7b-instruct-v2
granite-3B-code-base-2k MobileLLM-R1-950M-base
Mixtral-8x7B-Instruct-v0_1-GPTQ-4bit-32g-actOrder DeepSeek-Coder-V2-Lite-Instruct-GGUF-Q4_K_M
""".split()


def test_uuids_and_hyphenated_words_keep_their_kind() -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    [w] = bust(f"Request {a} ok", f"Request {b} ok")
    assert (w.kind, w.snippet) == ("uuid", b)
    upper = str(uuid.uuid4()).upper()
    [w] = bust(f"Request {a} ok", f"Request {upper} ok")
    assert w.kind == "uuid"
    # Another model is a real difference, not a nonce.
    assert bust("Model: Meta-Llama-3-8B-Instruct.", "Model: Meta-Llama-3-70B-Instruct.") == []
    assert (
        bust("Use Llama-3.1-8B-Instruct-Q4_K_M now", "Use Llama-3.1-8B-Instruct-Q5_K_M now") == []
    )
    assert bust("A state-of-the-art-Model-v2 here", "A state-of-the-art-Model-v3 here") == []
    for a, b in zip(NAMES[::2], NAMES[1::2], strict=True):
        assert bust(f"Model: {a} ok", f"Model: {b} ok") == [], (a, b)
    [w] = bust("Model-Release-Notes-2024 here", "Model-Release-Notes-2025 here")
    assert (w.kind, w.snippet) == ("counter", "2025")
