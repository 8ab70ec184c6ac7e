"""The secret registry holds what live objects hold, and traces keep no secret header.

- A secret registered for an owner (an ``Endpoint``, a transport, a counter, a store)
  is counted once per live owner and forgotten when the last one is collected: building
  endpoints with ever new keys does not grow the registry, while the keys of live ones
  stay masked (a real 401 that echoes the key, on ``ScriptedServer``).
- ``x-*`` response headers whose names say they hold a credential are kept as ``***``
  on the trace, and the others are masked by value — through every HTTP-style transport.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from agentflow import BadRequestError, Endpoint, HTTPTransport, redact, register_secret
from agentflow._redact import (
    MASK,
    _forget_all,
    is_secret_header,
    live_secrets,
    redact_headers,
    register_url,
)
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest
from tests.transport.rawserver import KINDS, make_transport

KEY = "sk-owned-7f3e9a1c5b2d"
REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    _forget_all()
    yield
    _forget_all()


def test_endpoints_with_ever_new_keys_do_not_grow_the_registry() -> None:
    for i in range(500):
        a = Endpoint(base_url="http://127.0.0.1:1/v1", api_key=f"sk-key-{i:06d}")
        b = Endpoint(base_url=f"http://u:pass-{i:06d}@127.0.0.1:1/v1")
        assert redact(f"sk-key-{i:06d} pass-{i:06d}") == f"{MASK} {MASK}"  # while they live
        del a, b
    gc.collect()
    assert live_secrets() == 0
    assert redact("sk-key-000499 pass-000499") == "sk-key-000499 pass-000499"


def test_a_secret_stays_while_any_owner_of_it_lives() -> None:
    a = Endpoint(base_url="http://127.0.0.1:1/v1", api_key=KEY)
    b = Endpoint(base_url="http://127.0.0.1:2/v1", api_key=KEY, headers={"x-api-key": KEY})
    assert live_secrets() == 1
    del a
    gc.collect()
    assert redact(KEY) == MASK
    del b
    gc.collect()
    assert redact(KEY) == KEY and live_secrets() == 0


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_a_copied_or_unpickled_endpoint_owns_its_secrets_too(how: str) -> None:
    """A worker's endpoint is an unpickled copy: once the original is collected, the
    copy's key, header and URL password must still be masked while the copy lives."""
    import copy
    import pickle

    original = Endpoint(
        base_url="http://u:pass-copied-1@127.0.0.1:1/v1",
        headers={"x-api-key": "hdr-copied-secret"},
        extra_body={"top_k": 5},
        name="replica-a",
    )
    keyed = Endpoint(base_url="http://127.0.0.1:2/v1", api_key=KEY)
    dup = {
        "pickle": lambda e: pickle.loads(pickle.dumps(e)),
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
    }[how]
    twin, keyed_twin = dup(original), dup(keyed)
    assert twin == original and keyed_twin == keyed
    assert (twin.chat_url, twin.request_headers()) == (
        original.chat_url,
        original.request_headers(),
    )
    del original, keyed
    gc.collect()
    text = f"{KEY} pass-copied-1 hdr-copied-secret"
    assert redact(text) == f"{MASK} {MASK} {MASK}"  # the copies hold them
    del twin, keyed_twin
    gc.collect()
    assert redact(text) == text and live_secrets() == 0


def test_what_users_register_stays_for_the_process() -> None:
    register_secret(KEY)
    ep = Endpoint(base_url="http://127.0.0.1:1/v1", api_key=KEY)
    del ep
    gc.collect()
    assert redact(KEY) == MASK and live_secrets() == 1
    register_secret(KEY)  # again: still one
    assert live_secrets() == 1


def test_url_credentials_of_an_owner_are_released_together() -> None:
    class Holder:
        pass

    h = Holder()
    register_url("http://alice:p%40ss-word@127.0.0.1/v1", owner=h)
    assert redact("p@ss-word p%40ss-word") == f"{MASK} {MASK}"
    assert live_secrets() == 3  # raw, decoded, Basic
    del h
    gc.collect()
    assert live_secrets() == 0


async def test_a_live_transports_key_is_masked_in_a_real_401_and_released_after() -> None:
    reply = Reply.error(401, f"Incorrect API key provided: {KEY}")
    async with ScriptedServer([reply]) as srv:
        t = HTTPTransport(Endpoint(base_url=srv.base_url, api_key=KEY))
        try:
            with pytest.raises(BadRequestError) as info:
                await t.stream(REQ)
        finally:
            await t.aclose()
        assert srv.requests[0].headers["Authorization"] == f"Bearer {KEY}"  # sent as given
    assert KEY not in str(info.value) and MASK in str(info.value)
    del t, info
    gc.collect()
    assert live_secrets() == 0


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("x-api-key", True),
        ("x-amz-security-token", True),
        ("x-goog-signature", True),
        ("x-auth-request-user", True),
        ("x-client-secret-id", True),
        ("x-session-cookie", True),
        ("x-apikey", True),
        ("x-request-id", False),
        ("x-ratelimit-remaining-tokens", False),
        ("x-ratelimit-limit-requests", False),
        ("x-agentflow-time-scale", False),
    ],
)
def test_which_headers_are_secret(name: str, secret: bool) -> None:
    assert is_secret_header(name) is secret


def test_redact_headers_keeps_x_headers_masked() -> None:
    register_secret(KEY)
    kept = redact_headers(
        [("X-Api-Key", "anything"), ("X-Debug", f"key={KEY}"), ("Server", KEY), ("x-n", "3")]
    )
    assert kept == {"x-api-key": MASK, "x-debug": f"key={MASK}", "x-n": "3"}


@pytest.mark.parametrize("kind", KINDS)
async def test_traces_keep_no_secret_response_header(kind: str) -> None:
    register_secret(KEY)
    headers = {
        "X-Api-Key": "echoed-key-123456",
        "X-Amz-Security-Token": "FwoGZXIvYXdzEJr",
        "X-Debug-Echo": f"Bearer {KEY}",
        "X-Request-Id": "req-42",
        "X-Ratelimit-Remaining-Tokens": "9000",
    }
    async with ScriptedServer([Reply.text("ok", headers=headers)]) as srv:
        t = make_transport(kind, srv.base_url)
        try:
            trace = await t.stream(REQ)
        finally:
            await t.aclose()
    kept = trace.response_headers
    assert kept["x-api-key"] == kept["x-amz-security-token"] == MASK
    assert kept["x-debug-echo"] == f"Bearer {MASK}"
    assert kept["x-request-id"] == "req-42" and kept["x-ratelimit-remaining-tokens"] == "9000"


def test_an_owner_without_weak_references_keeps_its_secret() -> None:
    """An owner that takes no weak references (a slotted object, a number) cannot say
    when it is gone: its secret stays registered, as one given without an owner."""

    class Slotted:
        __slots__ = ("key",)

    register_secret(KEY, owner=Slotted())
    gc.collect()
    assert redact(KEY) == MASK and live_secrets() == 1
