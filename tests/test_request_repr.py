"""The ``repr`` of a request, as the transport sends it (:class:`ChatRequest`) and as the
scripted server received it (:class:`RecordedRequest`), holds no credential: the value
of a credential header is masked whole and every registered secret is masked anywhere,
as :class:`Endpoint`'s ``repr`` does (docs/guide.md: credentials never appear in
``repr``s). Both were dataclass-generated and printed the header values as given."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentflow import Agent, Endpoint, Fleet, HTTPTransport, register_secret
from agentflow._redact import _forget_all
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest

HEADER_KEY = "hdrSECRET999"
API_KEY = "sk-live-SECRET-4242"
BODY_SECRET = "pw-in-the-body-777"


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    _forget_all()
    yield
    _forget_all()


def test_chat_request_repr_masks_credential_headers_and_registered_secrets() -> None:
    request = ChatRequest(
        model="m",
        messages=[{"role": "user", "content": f"my password is {BODY_SECRET}"}],
        headers={"api-key": HEADER_KEY, "x-trace": "t-1"},
        params={"temperature": 0.5},
    )
    shown = repr(request)
    assert HEADER_KEY not in shown
    assert "'api-key': '***'" in shown and "'x-trace': 't-1'" in shown
    assert "'temperature': 0.5" in shown and "model='m'" in shown
    assert BODY_SECRET in shown  # not registered: not a secret agentflow knows
    register_secret(BODY_SECRET)
    assert BODY_SECRET not in repr(request) and "my password is ***" in repr(request)


async def test_recorded_request_repr_masks_the_key_and_registered_secrets() -> None:
    async with ScriptedServer([Reply.text("hi")]) as server:
        endpoint = Endpoint(base_url=server.base_url, api_key=API_KEY)
        async with HTTPTransport(endpoint) as transport:
            agent = Agent(name="a", model="m", instructions=f"use {BODY_SECRET}")
            await Fleet(transport).run([agent.session("x")])
        register_secret(BODY_SECRET)
        (recorded,) = server.requests
        shown = repr(recorded)
    assert recorded.headers["Authorization"] == f"Bearer {API_KEY}"  # the data as received
    assert API_KEY not in shown and "'Authorization': '***'" in shown
    assert BODY_SECRET not in shown and "use ***" in shown
    assert "path='/v1/chat/completions'" in shown
