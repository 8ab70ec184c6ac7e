"""Every agentflow error crosses a process boundary whole (``Fleet(workers=N)`` sends
results, with the errors of failed sessions and of retried attempts, from its workers to
the parent): pickled and unpickled, it is the same class with the same message and
attributes. Most take keyword-only arguments, which Exception's own pickling cannot pass:
a retried 429 in a worker's result made the parent take the worker for dead."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import agentflow
from agentflow import _errors as E
from agentflow._trace import TurnTrace
from agentflow.store._recorded_error import RecordedError, recorded_error

TRACE = TurnTrace(
    endpoint="http://h/v1", model="m", response_id="r", sent_ns=1, headers_ns=2, end_ns=3,
    chunk_ns=(2,), chunk_chars=(1,), chunk_tokens=(1,), tokens_exact=True, n_events=1,
    content="a", reasoning="", tool_calls=(), finish_reason=None, usage=None, done=False,
)  # fmt: skip

SAMPLES: dict[str, E.AgentflowError] = {
    "AgentflowError": E.AgentflowError("base"),
    "ConfigError": E.ConfigError("bad x"),
    "TransportError": E.TransportError("wire", endpoint="http://h"),
    "ConnectError": E.ConnectError("no answer", endpoint="http://h"),
    "StreamInterrupted": E.StreamInterrupted("cut", endpoint="http://h", trace=TRACE),
    "StreamProtocolError": E.StreamProtocolError(
        "bad chunk", endpoint="e", trace=TRACE, payload=b"{", unfinished=True
    ),
    "UnexpectedContentType": E.UnexpectedContentType(
        "html", content_type="text/html", status=200, endpoint="e", payload=b"<html>"
    ),
    "APIStatusError": E.APIStatusError("teapot", status=418, body={"a": 1}, endpoint="e"),
    "BadRequestError": E.BadRequestError("bad", status=400, body="x", endpoint="e"),
    "RateLimitError": E.RateLimitError("slow", status=429, retry_after=2.0, endpoint="e"),
    "ServerError": E.ServerError("boom", status=503, body={"error": "x"}, endpoint="e"),
    "StreamTimeout": E.StreamTimeout("late", phase="idle", timeout_s=3.0, trace=TRACE),
    "AllReplicasDown": E.AllReplicasDown(
        {"a": E.ServerError("x", status=500), "b": None}, endpoint="e"
    ),
    "ToolError": E.ToolError("raised", tool="t"),
    "ToolTimeout": E.ToolTimeout(tool="t", timeout_s=2.0, threaded=True),
    "MaxTurnsExceeded": E.MaxTurnsExceeded(session_id="s", max_turns=3),
    "ContextOverflow": E.ContextOverflow("long", session_id="s", tokens=10, limit=5),
    "BudgetExceeded": E.BudgetExceeded("spent", budget="tokens", spent=10.0, limit=5.0),
    "ContextLengthExceeded": E.ContextLengthExceeded(
        "too long", status=400, tokens=9, limit=8, prompt_tokens=9, endpoint="e"
    ),
    "StoreError": E.StoreError("store"),
    "RunNotFound": E.RunNotFound("run-1", "runs.db"),
    "LeaseLost": E.LeaseLost("run-1", "s0"),
    "RecordsLeftOut": E.RecordsLeftOut([("turn s/1", ValueError("x"))], "runs.db"),
    "StoreBacklogFull": E.StoreBacklogFull(5, 5, "PostgreSQL db", "the server is down"),
    "WorkerError": E.WorkerError("gone", worker=1, exitcode=-9),
    "ServerStartError": E.ServerStartError("exited", server="llama.cpp", exitcode=3),
}


def test_every_error_class_has_a_sample() -> None:
    classes = {n for n in E.__all__ if isinstance(getattr(E, n), type)}
    assert classes == set(SAMPLES)
    assert {n for n in classes if n in agentflow.__all__} == classes


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, BaseException):
        return type(a) is type(b) and str(a) == str(b) and _same(a.__dict__, b.__dict__)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize(
    "error",
    [recorded_error("ServerError: http://h answered 500: boom"), RecordedError("plain")],
    ids=["read back", "base"],
)
def test_an_error_read_back_from_a_store_pickles_whole(error: RecordedError) -> None:
    """A stored session's error is of a class made when it is read: pickled by its
    type's name, it comes back as the same class (load_result's result pickles)."""
    back = pickle.loads(pickle.dumps(error))
    assert _same(back, error) and back.args == error.args
    assert type(back).__name__ == type(error).__name__ and isinstance(back, RecordedError)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_an_error_pickles_whole(name: str) -> None:
    error = SAMPLES[name]
    back = pickle.loads(pickle.dumps(error))
    assert _same(back, error), (back.__dict__, error.__dict__)
    assert back.args == error.args


def test_an_error_whose_str_raises_is_shown_by_its_type() -> None:
    """One session's error whose ``__str__`` raises must not end a stored run (the store
    and the report show errors as ``Type: message``)."""
    from agentflow._redact import error_line

    class Weird(Exception):
        def __str__(self) -> str:
            raise ValueError("no str")

    assert error_line(Weird("x")) == "Weird: <unprintable Weird>"
