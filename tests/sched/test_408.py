"""A 408 Request Timeout (the server stopped waiting for the request) is retried, and is
neither a ``BadRequestError`` ("resending will not help") nor charged to the replica: it
used to be a BadRequestError that the RetryPolicy resent all the same — the exception said
one thing and the retry did another."""

from __future__ import annotations

from agentflow import (
    Agent,
    APIStatusError,
    BadRequestError,
    Fleet,
    RetryPolicy,
    ServerError,
)
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import HTTPTransport
from agentflow.transport._status import api_status_error


def test_a_408_is_a_plain_api_status_error() -> None:
    exc = api_status_error(408, {"error": {"message": "slow"}}, "http://h/v1", lead="HTTP 408")
    assert type(exc) is APIStatusError and exc.status == 408
    assert not isinstance(exc, BadRequestError | ServerError)
    assert RetryPolicy().retryable(exc) and not RetryPolicy.blames_replica(exc)
    # Its neighbours keep their classes.
    assert type(api_status_error(400, None, "e", lead="x")) is BadRequestError
    assert type(api_status_error(409, None, "e", lead="x")) is BadRequestError


async def test_a_408_from_a_server_is_retried_and_not_blamed() -> None:
    replies = [Reply.error(408, "request timeout"), Reply.text("ok")]
    async with ScriptedServer(replies) as server, HTTPTransport(server.base_url) as http:
        fleet = Fleet(http, retry=RetryPolicy(backoff_s=0.0, jitter=False), probe_slots=False)
        result = await fleet.run([Agent(name="a", model="m").session("hi")])
        server.assert_complete()
    assert not result.failed, [s.error for s in result.failed]
    ((failed,),) = [t.failed_attempts for s in result.sessions for t in s.turns]
    assert type(failed.error) is APIStatusError and failed.error.status == 408
    (replica,) = result.replicas
    assert replica.failures == 0
