"""Token counters for plain text: tiktoken (offline), a Hugging Face ``tokenizer.json``,
and the model server's own ``POST /tokenize``.

:class:`TokenCounter` is what :class:`~agentflow.context.MessageCounter` builds on:
synchronous and local. The server's count is exact but costs a round trip, so
:class:`ServerCounter` is asynchronous and stands apart; use it to check or calibrate.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentflow._errors import ConfigError
from agentflow.context._encodings import ENCODING_NAMES, encoding

if TYPE_CHECKING:
    import tokenizers

__all__ = [
    "HFTokenizerCounter",
    "ServerCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizeDialect",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of plain text, locally and synchronously.

    Special-token text such as ``<|endoftext|>`` in the input is counted as ordinary
    text (it is what a user's message would contain), never rejected.

    A counter may also offer ``head_length(text, max_tokens) -> int``: the length in
    characters of ``text``'s first ``max_tokens`` tokens (``len(text)`` if it has no
    more), from one tokenization of a head of it. Cutting a long text to a token budget
    (:class:`~agentflow.context.TruncateToolOutputs`) then starts at that point instead
    of searching for it; both shipped counters offer it.
    """

    @property
    def name(self) -> str:
        """What tokenizer this is, e.g. ``tiktoken:cl100k_base``."""

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""


class TiktokenCounter:
    """A :class:`TokenCounter` over a shipped tiktoken encoding; works with no network.

    Args:
        encoding_name: ``"cl100k_base"`` (default) or ``"o200k_base"``.

    Raises:
        ConfigError: an encoding agentflow does not ship.
    """

    __slots__ = ("_decode", "_encode", "_heads", "_known", "_name", "_token_bytes")

    def __init__(self, encoding_name: str = "cl100k_base") -> None:
        if not isinstance(encoding_name, str) or encoding_name not in ENCODING_NAMES:
            raise ConfigError(
                f"TiktokenCounter.encoding_name must be one of {list(ENCODING_NAMES)}, "
                f"got {encoding_name!r}"
            )
        enc = encoding(encoding_name)
        self._encode = enc.encode_ordinary
        self._decode = enc.decode_bytes
        self._token_bytes = enc.decode_single_token_bytes
        self._name = f"tiktoken:{encoding_name}"
        self._heads = _Heads(self._head_ids)
        #: A text that ends where a piece ends, and its ids (see :meth:`encode`).
        self._known: tuple[str, list[int]] | None = None

    @property
    def name(self) -> str:
        """``tiktoken:<encoding name>``."""
        return self._name

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        return len(self.encode(text))

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``.

        A text that begins with the head :meth:`head_split` last split off, followed by
        a space, is tokenized from that space on only: the head's ids are known, and
        the space begins a piece (see there). That is the tool output
        :class:`~agentflow.context.TruncateToolOutputs` just cut, with its marker: its
        head is not tokenized a second time.
        """
        known = self._known
        if known is not None:
            head, ids = known
            b = len(head)
            if len(text) > b and text[b] == " " and text.startswith(head):
                return ids + self._encode(text[b:])
        return self._encode(text)

    def head_length(self, text: str, max_tokens: int) -> int:
        """The length in characters of ``text``'s first ``max_tokens`` tokens (all of
        it if it has no more); only a head of ``text`` a little longer is tokenized."""
        return self._heads(text, max_tokens)

    def head_split(self, text: str, max_tokens: int) -> tuple[int, int, int]:
        """:meth:`head_length` ``at``, and a point ``b < at`` with the ``k`` tokens before
        it such that ``text[:x]`` has ``k + count(text[b:x])`` tokens for every
        ``x ≥ b`` — found in the same tokenization; ``(at, 0, 0)`` (trivially so) when
        none is found.

        Why it holds: tiktoken splits a text with its encoding's regex into pieces and
        encodes each piece alone, and a space after a character that is not whitespace
        always begins a piece — none of the regex's alternatives (``cl100k_base``'s,
        ``o200k_base``'s) takes a space after a non-space character, nor looks back. So
        up to such a space at ``b``, any longer text is tokenized as the head was: its
        first ``k`` tokens, counted back from the head's first ``max_tokens`` to the
        bytes before ``b``. Counting heads of the text around ``at`` then tokenizes a
        few characters, not ``max_tokens`` tokens each time.
        """
        # The first max_tokens ids of the head that was split, and their bytes.
        seen: list[tuple[list[int], bytes]] = []

        def split(head: str, n: int) -> int:
            ids = self._encode(head)
            if len(ids) <= n:
                return -1
            first = ids[:n]
            data = self._decode(first)
            seen.append((first, data))
            return len(data.decode("utf-8", errors="ignore"))

        at = self._heads(text, max_tokens, split)
        if not seen:
            return at, 0, 0
        return self._split_before(text, at, *seen[-1])

    def head_split_ids(
        self, text: str, ids: Sequence[int], max_tokens: int
    ) -> tuple[int, int, int] | None:
        """:meth:`head_split` from ``text``'s first token ids, known already (the ids its
        count made, kept): nothing is tokenized. ``None`` when ``ids`` holds no more than
        ``max_tokens`` of them (a longer head is needed, or the text is that short), or
        when they are not the beginning of ``text``'s.

        Where a head's tokenization ends inside a piece the text's own goes on, the two
        may differ in the head's last tokens; the text's own are the exact ones.
        """
        if max_tokens <= 0 or len(ids) <= max_tokens:
            return None
        first = list(ids[:max_tokens])
        data = self._decode(first)
        decoded = data.decode("utf-8", errors="ignore")
        if not text.startswith(decoded):  # not this text's ids
            return None
        return self._split_before(text, len(decoded), first, data)

    def _split_before(
        self, text: str, at: int, ids: list[int], head: bytes
    ) -> tuple[int, int, int]:
        """``(at, b, k)`` for :meth:`head_split`: ``ids`` are the text's first tokens, up
        to ``at``, and ``head`` their bytes; remembers ``text[:b]`` and its ids for
        :meth:`encode`."""
        if not 0 < at < len(text):
            return at, 0, 0
        # The last space before ``at`` that follows a non-whitespace character (Python's
        # isspace() holds for every character the regex's \s matches). Before, not at:
        # the head, with whatever follows it, still has that space after the split.
        lo, end = max(1, at - _SPLIT_SEARCH), at
        while True:
            b = text.rfind(" ", lo, end)
            if b < lo:
                return at, 0, 0
            if not text[b - 1].isspace():
                break
            end = b
        try:
            target = len(text[:b].encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates, which tiktoken replaces
            return at, 0, 0
        k, size = len(ids), len(head)
        token_bytes = self._token_bytes
        while size > target and len(ids) - k < _SPLIT_SEARCH:
            k -= 1
            size -= len(token_bytes(ids[k]))
        if size != target:
            return at, 0, 0
        self._known = (text[:b], ids[:k])
        return at, b, k

    def _head_ids(self, head: str, max_tokens: int) -> int:
        ids = self._encode(head)
        if len(ids) <= max_tokens:
            return -1
        # A token may end inside a character: the head keeps only whole ones.
        return len(self._decode(ids[:max_tokens]).decode("utf-8", errors="ignore"))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self._name.removeprefix('tiktoken:')!r})"


#: How far back (characters, and tokens) :meth:`TiktokenCounter.head_split` looks for
#: the start of a piece before a cut.
_SPLIT_SEARCH = 64


class _Heads:
    """Finds where a text's first N tokens end by tokenizing a head of it, grown until it
    holds more than N tokens (``split`` answers -1 while it does not, else where the
    first N end).

    The first head is sized from the characters per token of the text cut last (5 on
    the first call, ample for English), with 15% to spare: texts cut one after another
    (the tool outputs of one session) are alike, so a head is rarely much longer than
    the cut, nor too short (then it doubles).
    """

    __slots__ = ("_split", "chars_per_token")

    def __init__(self, split: Callable[[str, int], int]) -> None:
        self._split = split
        self.chars_per_token = 5.0

    def __call__(
        self, text: str, max_tokens: int, split: Callable[[str, int], int] | None = None
    ) -> int:
        """Where ``text``'s first ``max_tokens`` tokens end; ``split`` (default: the
        counter's) answers for each head tokenized."""
        if max_tokens <= 0:
            return 0
        split = split or self._split
        size = int(max_tokens * self.chars_per_token) + 16
        while True:
            at = split(text[:size], max_tokens)
            if at >= 0:
                if at:
                    self.chars_per_token = min(16.0, max(0.25, 1.15 * at / max_tokens))
                return at
            if size >= len(text):
                return len(text)
            size *= 2


class HFTokenizerCounter:
    """A :class:`TokenCounter` over a Hugging Face ``tokenizers.Tokenizer`` — exact for
    the model it belongs to. Needs the ``hf`` extra (``pip install agentflow[hf]``).

    Special tokens the tokenizer would add around a sequence (BOS, EOS) are not counted:
    :class:`~agentflow.context.MessageCounter` accounts for template overhead itself.
    Special-token text in the input (``<|endoftext|>``) is counted as ordinary text, as
    :class:`TiktokenCounter` counts it (``tokenizers``' ``encode_special_tokens``). A
    tokenizer given that does not already do so is copied, not changed; one that cannot be
    copied (with a custom Python pre-tokenizer, normalizer or decoder) is used as it is,
    and counts special-token text as one token unless its own ``encode_special_tokens``
    is set.

    Args:
        tokenizer: a loaded ``tokenizers.Tokenizer``.
        name: a label; defaults to ``hf``.
    """

    __slots__ = ("_heads", "_name", "_tokenizer")

    def __init__(self, tokenizer: tokenizers.Tokenizer, *, name: str = "hf") -> None:
        self._tokenizer = _ordinary(tokenizer)
        self._name = name
        self._heads = _Heads(self._head_offsets)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizerCounter:
        """Load a ``tokenizer.json`` (the file Hugging Face model repositories carry).

        Raises:
            ConfigError: the ``tokenizers`` package is missing, or the file cannot be
                read as a tokenizer.
        """
        try:
            import tokenizers
        except ImportError as exc:
            raise ConfigError(
                "HFTokenizerCounter needs the `tokenizers` package: pip install 'agentflow[hf]'"
            ) from exc
        p = Path(path)
        try:
            tok = tokenizers.Tokenizer.from_file(str(p))
        except Exception as exc:  # tokenizers raises plain Exception for bad files
            raise ConfigError(f"path {str(p)!r} is not a readable tokenizer.json: {exc}") from exc
        tok.encode_special_tokens = True  # its own: no copy needed
        return cls(tok, name=f"hf:{p.parent.name or p.name}")

    @property
    def name(self) -> str:
        """``hf:<directory of the tokenizer.json>``, or the name given."""
        return self._name

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def head_length(self, text: str, max_tokens: int) -> int:
        """The length in characters of ``text``'s first ``max_tokens`` tokens (all of
        it if it has no more); only a head of ``text`` a little longer is tokenized."""
        return self._heads(text, max_tokens)

    def _head_offsets(self, head: str, max_tokens: int) -> int:
        offsets = self._tokenizer.encode(head, add_special_tokens=False).offsets
        if len(offsets) <= max_tokens:
            return -1
        end: int = offsets[max_tokens - 1][1]
        # A byte-level tokenizer's tokens of one character's bytes all span that whole
        # character: if the next token starts before the last one ends, the n-th token ends
        # inside a character, which is left out (the next token starts where it starts).
        following: int = offsets[max_tokens][0]
        return min(end, following)

    def __repr__(self) -> str:
        return f"HFTokenizerCounter(name={self._name!r})"


def _ordinary(tokenizer: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    """``tokenizer``, or a copy of it that encodes special-token text as ordinary text
    (``encode_special_tokens``). A tokenizer that cannot be copied (a custom Python
    component cannot be serialized) is used as it is, neither refused nor changed."""
    if tokenizer.encode_special_tokens:
        return tokenizer
    import tokenizers

    try:
        copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    except Exception:  # tokenizers raises plain Exception ("cannot be serialized")
        return tokenizer
    copy.encode_special_tokens = True
    return copy


# The server's own count lives apart (asynchronous, over HTTP); re-exported here for
# code that imported it from this module.
from agentflow.context._server_counter import ServerCounter, TokenizeDialect  # noqa: E402
