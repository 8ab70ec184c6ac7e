"""Credential values are masked by value, userinfo is stripped, and nothing else changes.

The end-to-end proof (a fleet run through every exit path) is ``tests/test_secrets.py``;
these pin down each boundary on its own: what is registered, what is masked, what is
left alone, and that the credentials still reach the server.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator

import openai
import pytest

from agentflow import (
    AgentflowError,
    APIStatusError,
    BadRequestError,
    ConfigError,
    Endpoint,
    Fleet,
    HTTPTransport,
    Replica,
    StreamProtocolError,
    TransportError,
    redact,
    register_secret,
)
from agentflow._logging import get_logger
from agentflow._redact import _forget_all, display_url, redact_data
from agentflow.context import ServerCounter
from agentflow.sched._replica import ReplicaState
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest, OpenAITransport

KEY = "sk-proj-UNIT-9d8c7b6a5f4e"
PASSWORD = "p@ss/w0rd-UNIT"  # percent-encoded in the URL below
URL = "http://alice:p%40ss%2Fw0rd-UNIT@127.0.0.1:8000/v1"
REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    """Each test starts with no registered secret and leaves none."""
    _forget_all()
    yield
    _forget_all()


def test_display_url_strips_userinfo_only() -> None:
    """Userinfo goes, with its "@"; host, port, path and query stay; non-URLs are untouched."""
    assert display_url(URL) == "http://127.0.0.1:8000/v1"
    assert display_url("https://u@h.example/v1?a=b") == "https://h.example/v1?a=b"
    assert display_url("http://u:p@ss@h:1/v1") == "http://h:1/v1"  # unescaped "@" in a password
    for same in ("http://127.0.0.1:8000/v1", "http://h/a@b", "me@example.com", "coder-001"):
        assert display_url(same) == same


def test_redact_masks_registered_values_tokens_and_userinfo() -> None:
    """Registered values anywhere, Bearer tokens, base64 Basic tokens and URL userinfo."""
    register_secret(KEY)
    text = f"echo {KEY}!{KEY} Bearer abc.def Basic dXNlcjpwYXNz see http://u:pw@host:1/v1 end"
    assert redact(text) == "echo ***!*** Bearer *** Basic *** see http://host:1/v1 end"
    # Words that only look like credentials stay.
    prose = "Basic authentication failed; basic password rules; the Bearer"
    assert redact(prose) == prose
    assert redact("nothing to hide: 42 tokens") == "nothing to hide: 42 tokens"


def test_registration_rules() -> None:
    """Bearer prefixes are dropped, short values ignored, a longer secret masked whole."""
    register_secret(f"Bearer {KEY}")
    register_secret("abc")  # too short to mask by value: it would garble every message
    register_secret(None)
    register_secret(KEY[:10])  # a prefix of KEY: KEY must still be masked whole
    assert redact(f"[{KEY}] [abc]") == "[***] [abc]"
    assert redact(f"[{KEY[:10]}]") == "[***]"


def test_endpoint_registers_and_hides_its_credentials() -> None:
    """repr, name and the transport's label show none of key, header key or userinfo;
    the request still carries them all."""
    header_key = "hdr-UNIT-1a2b3c4d5e"
    keyed = Endpoint(base_url=display_url(URL), api_key=KEY)  # a key, or userinfo: not both
    ep = Endpoint(
        base_url=URL,
        headers={"api-key": header_key, "X-Trace": f"Bearer {KEY}", "X-Team": "blue"},
    )
    text = repr(ep) + ep.name + repr(keyed)
    for secret in (KEY, header_key, "alice", "p%40ss", PASSWORD):
        assert secret not in text
    assert "'api-key': '***'" in text and "'X-Team': 'blue'" in text
    assert ep.name == "127.0.0.1:8000"
    t = HTTPTransport(ep)
    assert t.endpoint == "http://127.0.0.1:8000/v1" and "alice" not in repr(t)
    # Registered by value: each form of the password, its Basic form, the header key.
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for secret in (KEY, header_key, "p%40ss%2Fw0rd-UNIT", PASSWORD, basic):
        assert redact(f"<{secret}>") == "<***>", secret
    # What is sent is untouched.
    sent = ep.request_headers()
    assert sent["Authorization"] == f"Basic {basic}" and sent["api-key"] == header_key
    assert keyed.request_headers()["Authorization"] == f"Bearer {KEY}"
    assert ep.base_url == URL and ep.chat_url == f"{display_url(URL)}/chat/completions"
    with pytest.raises(ConfigError, match="either api_key or a user:password@"):
        Endpoint(base_url=URL, api_key=KEY)


def test_error_messages_attributes_and_bodies_are_masked() -> None:
    """An error built from an echoing answer keeps the facts and loses the key."""
    register_secret(KEY)
    err = BadRequestError(
        f"{URL} answered 401: bad key {KEY}",
        status=401,
        body={"error": {"message": f"bad key {KEY}", "api_key": "anything", "code": 401}},
        endpoint=URL,
    )
    assert str(err) == "http://127.0.0.1:8000/v1 answered 401: bad key ***"
    assert KEY not in repr(err) and err.endpoint == "http://127.0.0.1:8000/v1"
    assert err.body == {"error": {"message": "bad key ***", "api_key": "***", "code": 401}}
    assert err.status == 401
    bad = StreamProtocolError("malformed", payload=b"data: {" + KEY.encode() + b"\xff")
    assert bad.payload == b"data: {***\xff"
    with pytest.raises(ConfigError) as info:
        Endpoint(base_url="ftp://bob:hunter2-UNIT@host/v1")
    assert "hunter2" not in str(info.value) and "ftp://host/v1" in str(info.value)
    assert str(AgentflowError(f"plain {KEY}", 3)) == "('plain ***', 3)"
    assert isinstance(TransportError("x", endpoint=None).endpoint, type(None))


def test_redact_data_masks_strings_and_credential_keys_only() -> None:
    """Strings anywhere are redacted and credential-named keys masked; numbers and
    report fields that merely mention tokens are not."""
    register_secret(KEY)
    data = {
        "run": {"base_url": URL, "api_key": "short", "note": f"k={KEY}"},
        "max_tokens": 128,
        "token_source": "server_usage",
        "rows": [{"error": f"Bearer {KEY}"}, 1.5, None],
    }
    assert redact_data(data) == {
        "run": {"base_url": "http://127.0.0.1:8000/v1", "api_key": "***", "note": "k=***"},
        "max_tokens": 128,
        "token_source": "server_usage",
        "rows": [{"error": "Bearer ***"}, 1.5, None],
    }


def test_log_lines_mask_values_in_any_field() -> None:
    """A registered key inside any field's repr is masked, not only credential-named fields."""
    register_secret(KEY)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("agentflow.test_redact_values")
    logger.addHandler(handler := Keep())
    logger.setLevel(logging.DEBUG)
    try:
        get_logger("agentflow.test_redact_values").debug(
            "x", detail={"echo": KEY}, url=URL, output_tokens=5
        )
    finally:
        logger.removeHandler(handler)
    assert lines and KEY not in lines[0] and "alice" not in lines[0]
    assert "'echo': '***'" in lines[0] and "output_tokens=5" in lines[0]


class _OwnTransport:
    """A user's own transport whose endpoint label carries userinfo."""

    endpoint = "http://dave:own-UNIT-secret@10.0.0.7:8000/v1"

    async def stream(self, request: ChatRequest, sink: object = None) -> object:
        raise NotImplementedError


def test_replica_names_never_hold_userinfo() -> None:
    """A replica named after its transport is named without userinfo, whoever built it."""
    ours = Replica(transport=HTTPTransport(Endpoint(base_url=URL)))
    theirs = Replica(transport=_OwnTransport())  # type: ignore[arg-type]
    names = [ReplicaState(r, time.perf_counter_ns).name for r in (ours, theirs)]
    assert names == ["http://127.0.0.1:8000/v1", "http://10.0.0.7:8000/v1"]
    assert "alice" not in repr(Fleet([ours]).replicas)


async def test_openai_transport_registers_the_clients_key() -> None:
    """The SDK path: the client's key is masked in the 401 a server echoes it in."""
    reply = Reply.error(401, f"Incorrect API key provided: {KEY}")
    async with ScriptedServer([reply]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key=KEY, max_retries=0)
        transport = OpenAITransport(client, owns_client=True)
        with pytest.raises(APIStatusError) as info:
            await transport.stream(REQ)
        await transport.aclose()
    assert srv.requests[0].headers["Authorization"] == f"Bearer {KEY}"
    assert info.value.status == 401 and KEY not in str(info.value)
    assert "Incorrect API key provided: ***" in str(info.value)


async def test_server_counter_registers_its_key_and_hides_userinfo() -> None:
    """ServerCounter: the key is masked, and its name and repr carry no userinfo."""
    counter = ServerCounter("http://carol:s3cret-UNIT@127.0.0.1:9/v1", api_key=KEY)
    try:
        assert counter.name == "server:http://127.0.0.1:9"
        assert "carol" not in repr(counter) and redact(KEY) == "***"
        assert redact("s3cret-UNIT") == "***"
    finally:
        await counter.aclose()


def test_a_token_given_as_the_user_name_is_masked() -> None:
    """``https://TOKEN@host/v1``: with no password the user name is the credential."""
    token = "ghp_TOKENasUSER-9f8e7d6c5b"
    ep = Endpoint(base_url=f"http://{token}@127.0.0.1:8000/v1")
    basic = base64.b64encode(f"{token}:".encode()).decode()
    assert ep.request_headers()["Authorization"] == f"Basic {basic}"
    assert redact(f"echo {token} and {basic}") == "echo *** and ***"
    assert token not in repr(ep) + ep.name + ep.chat_url
