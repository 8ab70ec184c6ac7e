"""``repr(DemoConfig(...))`` printed its ``api_key`` and the password in ``base_url``
(a dataclass's generated repr). It now shows neither, as
:class:`~agentflow.transport.Endpoint`'s repr does; every other field is shown."""

from __future__ import annotations

from dataclasses import fields

from agentflow.demo.run import DemoConfig

KEY = "sk-live-SECRET-KEY-0123456789"
PASSWORD = "url-PASSWORD-9876"


def test_the_repr_shows_no_key_and_no_url_password() -> None:
    c = DemoConfig(
        base_url=f"http://user:{PASSWORD}@127.0.0.1:9/v1", api_key=KEY, model="m", live=False
    )
    shown = repr(c)
    assert KEY not in shown and PASSWORD not in shown
    assert "base_url='http://127.0.0.1:9/v1'" in shown and "model='m'" in shown
    shown_names = [part.split("=")[0] for part in shown.removeprefix("DemoConfig(").split(", ")]
    assert [f.name for f in fields(DemoConfig) if f.name != "api_key"] == [
        n for n in shown_names if n.isidentifier()
    ]


def test_without_a_base_url_the_repr_says_none() -> None:
    assert "base_url=None" in repr(DemoConfig(live=False))
