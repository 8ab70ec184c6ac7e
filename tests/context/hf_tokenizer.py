"""A small real BPE ``tokenizer.json``, trained on fixed text (deterministic)."""

from __future__ import annotations

from pathlib import Path

#: The text the tokenizer is trained on.
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a tokenizer splits text into tokens and tokens into ids",
    "agents send prompts; servers count prompt tokens",
] * 20


def train(path: Path) -> Path:
    """Train the tokenizer on :data:`CORPUS` and save it as ``path``."""
    import tokenizers
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.save(str(path))
    return path


#: Special tokens of the byte-level tokenizer (as Qwen's and SmolLM's carry).
SPECIAL = ["<|endoftext|>", "<|im_start|>"]


def train_byte_level(path: Path) -> Path:
    """A byte-level BPE tokenizer (GPT-2 style, as most served models have), trained on
    :data:`CORPUS` with non-Latin text and :data:`SPECIAL`; saved as ``path``. A character
    of several bytes that it has not merged is several tokens sharing that character's
    offsets."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*CORPUS, *["中文 😀 é"] * 50], trainer=trainer)
    tok.save(str(path))
    return path
