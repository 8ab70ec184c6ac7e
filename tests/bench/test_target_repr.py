"""``repr(HTTPTarget(...))`` printed its ``api_key`` and the password in its base URL
(a dataclass's generated repr): in a traceback's locals, a log line, a debugger. It now
shows neither, as :class:`~agentflow.transport.Endpoint`'s repr does."""

from __future__ import annotations

from agentflow.bench import HTTPTarget

KEY = "sk-live-SECRET-KEY-0123456789"
PASSWORD = "url-PASSWORD-9876"


def test_the_repr_shows_no_key_and_no_url_password() -> None:
    t = HTTPTarget(base_url=f"http://user:{PASSWORD}@127.0.0.1:9/v1", model="m", api_key=KEY)
    shown = repr(t)
    assert KEY not in shown and PASSWORD not in shown and "user" not in shown
    assert (
        shown
        == "HTTPTarget(base_url='http://127.0.0.1:9/v1', model='m', timeouts=None, virtual=False)"
    )
    assert t.api_key == KEY and PASSWORD in t.base_url  # what it sends is unchanged
