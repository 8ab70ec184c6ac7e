"""Content parts of a chat message (``content`` as a list), as the prompt counts see them:
which part kinds carry text, which are images, and what an image is counted as. Shared by
:class:`~agentflow.context.MessageCounter` (exact counts) and the cheap 4-characters-a-token
estimate a turn is charged with when no context link counts (``_session_turn.py``), so
the two agree on what a part costs. It imports nothing: the per-turn path can load it."""

from __future__ import annotations

from typing import Final

__all__ = ["CHARS_PER_TOKEN", "IMAGE_PARTS", "IMAGE_TOKENS", "TEXT_PARTS"]

#: Part types whose ``text`` is prompt text (``None``: a part without a type). Tuples,
#: not sets: a malformed part's ``type`` may be unhashable.
TEXT_PARTS: Final = (None, "text", "input_text", "output_text")
#: Part types that are images.
IMAGE_PARTS: Final = ("image_url", "image", "input_image")
#: Tokens an image part is counted as by default (OpenAI's low-detail figure).
IMAGE_TOKENS: Final = 85
#: Characters a token in the cheap estimate.
CHARS_PER_TOKEN: Final = 4
