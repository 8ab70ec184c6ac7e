"""tiktoken encodings that work offline: the BPE files ship inside agentflow.

tiktoken downloads an encoding's BPE ranks on first use (and fails without network);
agentflow ships the two files it needs in ``agentflow/context/encodings/`` and builds
:class:`tiktoken.Encoding` objects from them directly, with tiktoken's public
constructor ``tiktoken.Encoding(name, pat_str=, mergeable_ranks=, special_tokens=)``.

Why not point ``TIKTOKEN_CACHE_DIR`` at the shipped files? tiktoken reads that variable
at call time, so agentflow would have to set it in ``os.environ`` — process-wide, under
every thread, for the user's own tiktoken calls too. Building the encoding here touches
no global state and never reaches tiktoken's download path. The files keep the names
tiktoken's cache gives them (the SHA-1 of their download URL), so the directory
(:data:`ENCODINGS_DIR`) is also a valid ``TIKTOKEN_CACHE_DIR`` for anyone who wants
``tiktoken.get_encoding`` itself to work offline.

Each file is checked against the SHA-256 tiktoken expects before it is used; the split
regexes and special tokens are those of ``tiktoken_ext.openai_public`` (MIT), and a test
checks that they still are. The files come from the PyPI wheel of litellm (MIT), which
carries byte-identical copies of OpenAI's published files.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from agentflow._errors import ConfigError

__all__ = ["ENCODINGS_DIR", "ENCODING_NAMES", "encoding", "encoding_name_for_model"]

#: The directory holding the shipped BPE files, named as tiktoken's cache names them.
ENCODINGS_DIR = Path(__file__).resolve().parent / "encodings"

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _Spec:
    url: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]

    @property
    def path(self) -> Path:
        return ENCODINGS_DIR / hashlib.sha1(self.url.encode()).hexdigest()


_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

_SPECS: dict[str, _Spec] = {
    "cl100k_base": _Spec(
        url="https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": _Spec(
        url="https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT,
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}

#: The encodings that work offline.
ENCODING_NAMES: tuple[str, ...] = tuple(sorted(_SPECS))

_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}


def encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """A tiktoken encoding built from the BPE file shipped with agentflow; no network.

    Built once per process (about 0.2 s for ``cl100k_base``), then shared; tiktoken's
    encodings are thread-safe.

    Args:
        name: ``"cl100k_base"`` (GPT-4, GPT-3.5) or ``"o200k_base"`` (GPT-4o, o1 and later).

    Raises:
        ConfigError: ``name`` is not a shipped encoding, or its file is damaged.
    """
    enc = _loaded.get(name) if isinstance(name, str) else None
    if enc is not None:
        return enc
    spec = _SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError(f"encoding name must be one of {list(ENCODING_NAMES)}, got {name!r}")
    with _lock:
        enc = _loaded.get(name)
        if enc is None:
            enc = _loaded[name] = tiktoken.Encoding(
                name,
                pat_str=spec.pat_str,
                mergeable_ranks=_ranks(name, spec),
                special_tokens=dict(spec.special_tokens),
            )
    return enc


def encoding_name_for_model(model: str) -> str:
    """The shipped encoding closest to ``model``'s own: ``o200k_base`` for the models
    tiktoken maps to it or to ``o200k_harmony`` (``gpt-4o``, ``o1``, ``o3``, ``o4-mini``,
    ``gpt-4.1``, ``gpt-4.5``, ``gpt-5``, ``gpt-oss-*``, …), else ``cl100k_base``.

    Those families are mapped by agentflow itself, so also with a tiktoken older than
    them (0.7 knows only ``gpt-4o``); any other model goes by the installed tiktoken.
    A provider prefix is dropped first, as :func:`~agentflow.context.window_for` does:
    ``"openai/gpt-4o"`` is ``gpt-4o``. ``o200k_harmony`` has ``o200k_base``'s ranks (only
    its special tokens differ), so ordinary text counts the same.

    For models outside OpenAI's family this is only an estimate's starting point; the
    :class:`~agentflow.context.Calibrator` learns the rest from the server's counts.
    """
    bare = model.rsplit("/", 1)[-1]
    if bare in _OWN_MODELS or bare.startswith(_OWN_PREFIXES):
        return "o200k_base"
    try:
        name = tiktoken.encoding_name_for_model(bare)
    except KeyError:
        return "cl100k_base"
    name = _SAME_RANKS.get(name, name)
    return name if name in _SPECS else "cl100k_base"


# Models mapped to o200k_base here whatever the installed tiktoken knows (the o200k
# entries of tiktoken 0.14's tables, gpt-oss included): pyproject allows tiktoken 0.7, which
# knows only gpt-4o, and would give cl100k_base for o1, o3, o4-mini, gpt-4.1, gpt-5 and
# gpt-oss (0.11 maps it to o200k_harmony).
_OWN_MODELS = frozenset({"gpt-4o", "o1", "o3", "o4-mini", "gpt-4.1", "gpt-5"})
_OWN_PREFIXES = (
    "gpt-4o-",
    "chatgpt-4o-",
    "ft:gpt-4o",
    "o1-",
    "o3-",
    "o4-mini-",
    "gpt-4.1-",
    "gpt-4.5-",
    "gpt-5",
    "gpt-oss-",
)

# tiktoken encodings that share a shipped encoding's ranks and differ only in special tokens.
_SAME_RANKS = {"o200k_harmony": "o200k_base"}


def _ranks(name: str, spec: _Spec) -> dict[bytes, int]:
    path = spec.path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"encoding {name!r}: cannot read its BPE file {path}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ConfigError(
            f"encoding {name!r}: {path} has SHA-256 {digest}, expected {spec.sha256} "
            "(the installed file is damaged; reinstall agentflow)"
        )
    # The same parse as tiktoken.load.load_tiktoken_bpe, which would also copy the file
    # into tiktoken's cache directory.
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks
