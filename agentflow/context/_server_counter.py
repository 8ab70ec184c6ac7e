"""The model server's own token count, from its ``POST /tokenize``: exact, but a round
trip per call, so asynchronous and apart from the local
:class:`~agentflow.context.TokenCounter` implementations (``_counting.py``); use it to check
or calibrate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from agentflow._base_url import check_base_url
from agentflow._errors import ConfigError, ConnectError, StreamProtocolError, StreamTimeout
from agentflow._redact import display_url, register_secret, register_url
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.transport._decode import decode_json
from agentflow.transport._shared import MAX_ERROR_BODY, status_error

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ServerCounter", "TokenizeDialect"]


#: The request shape of a server's ``/tokenize``: vLLM's (also agentflow's simulator),
#: or llama.cpp's.
TokenizeDialect = Literal["auto", "vllm", "llamacpp"]

_DIALECTS = ("auto", "vllm", "llamacpp")


class _Tokenized(msgspec.Struct):
    tokens: list[int]
    count: int | None = None


_decode_tokenized = msgspec.json.Decoder(_Tokenized)


def _llamacpp_body(text: str) -> dict[str, Any]:
    """llama.cpp's ``/tokenize`` body: the text, without special tokens (BOS)."""
    return {"content": text, "add_special": False}


class ServerCounter:
    """The server's own token count, from its ``POST /tokenize``; asynchronous.

    vLLM (and agentflow's simulator) take ``{"model", "prompt"}`` and answer
    ``{"tokens": [...], "count": n}``; llama.cpp takes ``{"content"}`` and answers
    ``{"tokens": [...]}``. With ``dialect="auto"`` the first request is vLLM's, and an
    answer without ``count`` switches this counter to llama.cpp's shape for good.

    No special tokens (BOS) are added to the text, and each server is told so in its own
    words: vLLM gets ``"add_special_tokens": false`` (its ``/tokenize`` adds them by
    default), llama.cpp ``"add_special": false`` (its default, said anyway); the
    simulator adds none either way.

    Args:
        base_url: the server, with or without a trailing ``/v1`` (``/tokenize`` is at
            the root on all three servers).
        model: sent as vLLM's ``model`` field (optional there).
        dialect: ``"auto"``, ``"vllm"`` or ``"llamacpp"``.
        api_key: sent as ``Authorization: Bearer …``.
        timeout_s: the limit for one request, connection included.
        session: an ``aiohttp.ClientSession`` to use (not closed by :meth:`aclose`);
            by default one is created on first use.

    Raises:
        ConfigError: a malformed ``base_url``, unknown ``dialect``, or a ``timeout_s``
            that is not a finite number of seconds of at least 1 ms.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        dialect: TokenizeDialect = "auto",
        api_key: str | None = None,
        timeout_s: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        check_base_url(base_url, "ServerCounter.base_url")
        if dialect not in _DIALECTS:
            raise ConfigError(f"ServerCounter.dialect must be one of {_DIALECTS}, got {dialect!r}")
        timeout_s = check_seconds(timeout_s, "ServerCounter.timeout_s", 0.001, MAX_TIMEOUT_S)
        root = base_url.rstrip("/").removesuffix("/v1")
        self.url = f"{root}/tokenize"
        register_url(root, owner=self)
        register_secret(api_key, owner=self)
        self.endpoint = display_url(root)
        self.model = model
        self.dialect: TokenizeDialect = dialect
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout_s = timeout_s
        self._session = session
        self._owns_session = session is None

    @property
    def name(self) -> str:
        """``server:<base url>``."""
        return f"server:{self.endpoint}"

    async def encode(self, text: str) -> list[int]:
        """The server's token ids for ``text``.

        Raises:
            ConnectError: the server could not be reached.
            APIStatusError: it answered non-2xx (``BadRequestError``, ``ServerError``, …).
            StreamProtocolError: the answer was not a ``/tokenize`` answer.
            StreamTimeout: ``timeout_s`` ran out (``phase="total"``).
        """
        if self.dialect == "llamacpp":
            return (await self._post(_llamacpp_body(text))).tokens
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model is not None:
            body["model"] = self.model
        answer = await self._post(body)
        if self.dialect == "auto":
            if answer.count is None:
                self.dialect = "llamacpp"
                return (await self._post(_llamacpp_body(text))).tokens
            self.dialect = "vllm"
        return answer.tokens

    async def count(self, text: str) -> int:
        """The server's token count for ``text`` (raises as :meth:`encode` does)."""
        return len(await self.encode(text))

    async def count_many(self, texts: Sequence[str]) -> list[int]:
        """:meth:`count` of each text, one request after another."""
        return [await self.count(t) for t in texts]

    async def _post(self, body: dict[str, Any]) -> _Tokenized:
        import aiohttp  # here, not at import: `import agentflow` does not load it

        session = self._session
        if session is None:
            session = self._session = aiohttp.ClientSession()
        try:
            async with session.post(
                self.url, data=msgspec.json.encode(body), headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            ) as resp:  # fmt: skip
                if resp.status >= 300:
                    raise await status_error(
                        resp.status, resp.headers, resp.content.read(MAX_ERROR_BODY), self.endpoint
                    )
                raw = await resp.read()
        except TimeoutError as exc:
            raise StreamTimeout(
                f"{self.url} did not answer within {self._timeout_s} s",
                phase="total",
                timeout_s=self._timeout_s,
                endpoint=self.endpoint,
            ) from exc
        except aiohttp.ClientError as exc:
            raise ConnectError(f"{self.url}: {exc!r}", endpoint=self.endpoint) from exc
        try:
            return decode_json(raw, _decode_tokenized.decode)
        except msgspec.DecodeError as exc:
            raise StreamProtocolError(
                f"{self.url} answered something that is not a /tokenize answer: {exc}",
                endpoint=self.endpoint,
                payload=raw[:500],
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP session this counter created. Safe to call twice."""
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def __repr__(self) -> str:
        return f"ServerCounter({self.endpoint!r}, dialect={self.dialect!r})"
