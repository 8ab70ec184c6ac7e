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
