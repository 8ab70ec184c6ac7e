"""A tool's output holding a lone surrogate — what ``os.fsdecode`` makes of a file
name's undecodable bytes — is sent with U+FFFD in its place: the session goes on (it
used to end in an error, the request could not be encoded), and the run's store keeps
the result (it used to fail the commit). A result that is not a ``str`` is made text the
model can read: bytes decoded, a ``Path`` or ``Decimal`` unquoted, containers as JSON."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import sqlite3
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import msgspec
import pydantic
import pytest

from agentflow import Agent, Fleet, HTTPTransport, Tool
from agentflow._sendable import sendable_text
from agentflow.store import SQLiteStore
from agentflow.testing import Reply, ScriptedServer
from tests.toolcall import one_call, tool_message


def list_files(path: str) -> str:
    """List a directory's files.

    Args:
        path: the directory.
    """
    return f"{path}/caf\udce9.txt\n{path}/\ud83d\ude00.md"  # as os.fsdecode and a split pair


def test_lone_surrogates_become_replacement_characters_and_pairs_are_joined() -> None:
    assert sendable_text("caf\udce9") == "caf\ufffd"
    assert sendable_text("\ud83d\ude00 and \ud800") == "\U0001f600 and \ufffd"
    text = "héllo, 世界"
    assert sendable_text(text) is text  # text that can be sent is returned as it is
    assert sendable_text("plain") == "plain"


async def test_a_tool_output_with_a_lone_surrogate_is_sent_and_stored(tmp_path: Path) -> None:
    agent = Agent(name="a", model="m", tools=[list_files])
    store = SQLiteStore(tmp_path / "run.db")
    async with (
        ScriptedServer([Reply.tool_call("list_files", {"path": "src"}), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await Fleet(http, store=store).run([agent.session("go")], run_id="r")
        srv.assert_complete()
    await store.aclose()
    (session,) = result.sessions
    assert session.status == "completed", session.error
    sent = tool_message(srv, 1)
    assert sent == "src/caf\ufffd.txt\nsrc/\U0001f600.md"
    rows = await asyncio.to_thread(
        lambda: (
            sqlite3.connect(tmp_path / "run.db").execute("SELECT output FROM tool_calls").fetchall()
        )
    )
    assert rows == [(sent,)]


def read_raw(path: str) -> bytes:
    """Read a file's bytes.

    Args:
        path: the file.
    """
    return b"caf\xc3\xa9 \xff\n"  # UTF-8, then a byte no UTF-8 text holds


async def test_a_tool_returning_bytes_sends_their_text() -> None:
    """Bytes (``subprocess.check_output``, a file read in ``"rb"``) reach the model as
    their UTF-8 text, a byte that is not UTF-8 as U+FFFD; they used to be base64 in
    JSON quotes (``"Y2Fmw6kg/wo="``)."""
    agent = Agent(name="a", model="m", tools=[read_raw])
    result, sent = await one_call(agent, "read_raw", {"path": "f"})
    assert result.ok, result.error
    assert sent == "caf\u00e9 \ufffd\n"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (bytearray(b"rows: 3"), "rows: 3"),
        (memoryview(b"rows: 4"), "rows: 4"),
        (Path("src/main.py"), "src/main.py"),
        (Decimal("9.50"), "9.50"),
        (uuid.UUID(int=7), "00000000-0000-0000-0000-000000000007"),
        (datetime.date(2024, 5, 17), "2024-05-17"),
        # JSON-native values and containers stay JSON, as before
        (None, "null"),
        (True, "true"),
        (42, "42"),
        ({"path": Path("a"), "size": Decimal("2")}, '{"path":"a","size":"2"}'),
        ([Path("a"), 1], '["a",1]'),
    ],
)
async def test_a_scalar_result_is_its_text_and_a_container_is_json(
    value: object, text: str
) -> None:
    """A ``Path`` or a ``Decimal`` arrives as its text, not in JSON quotes (``"9.50"``)."""
    t = Tool.from_function(lambda: value, name="get", in_thread=False)
    assert await t.invoke("{}") == text


class Listing(pydantic.BaseModel):
    names: list[str]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (["caf\udce9.txt", "b.md"], '["caf\ufffd.txt","b.md"]'),  # os.listdir's
        ({"caf\udce9": ("\ud83d\ude00", 1, None)}, '{"caf\ufffd":["\U0001f600",1,null]}'),
        (Path("src/caf\udce9.txt"), "src/caf\ufffd.txt"),
        (Listing(names=["caf\udce9"]), '{"names":["caf\ufffd"]}'),
    ],
)
async def test_a_json_result_with_a_lone_surrogate_is_mended_as_text_is(
    value: object, text: str
) -> None:
    """A list, dict or model holding a lone surrogate (``os.listdir`` of a directory
    with an undecodable file name) used to be an error result, "cannot be made text:
    UnicodeEncodeError", while the same names returned as a ``str`` were mended."""
    t = Tool.from_function(lambda: value, name="ls", in_thread=False)
    assert await t.invoke("{}") == text


class Hit(pydantic.BaseModel):
    path: str
    line: int


@dataclasses.dataclass
class Page:
    hits: list[Hit]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ([Hit(path="a.py", line=3)], '[{"path":"a.py","line":3}]'),
        (
            {"total": 1, "hits": [Hit(path="a.py", line=3)]},
            '{"total":1,"hits":[{"path":"a.py","line":3}]}',
        ),
        (Page(hits=[Hit(path="a.py", line=3)]), '{"hits":[{"path":"a.py","line":3}]}'),
        ([Listing(names=["caf\udce9"])], '[{"names":["caf\ufffd"]}]'),
    ],
)
async def test_pydantic_models_inside_a_result_are_json(value: object, text: str) -> None:
    """A model in a list, a dict or a dataclass reached the model as its ``str()``
    (``"path='a.py' line=3"``), not as JSON as a model returned alone does."""
    t = Tool.from_function(lambda: value, name="hits", in_thread=False)
    assert await t.invoke("{}") == text


class Handle:
    def __str__(self) -> str:
        return "handle#1"


class Row(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    name: str
    h: Handle


class Blob(pydantic.BaseModel):
    data: bytes


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ([Blob(data=b"\xff\xfe")], "[\"data=b'\\\\xff\\\\xfe'\"]"),
        ([Row(name="a", h=Handle())], "name='a' h="),
    ],
)
async def test_a_model_inside_a_result_with_no_json_form_is_its_str(
    value: object, text: str
) -> None:
    """A model JSON cannot hold (non-UTF-8 bytes, an arbitrary-type field) inside a list
    made the whole result an error; it is its ``str()``, as before models became JSON."""
    t = Tool.from_function(lambda: value, name="rows", in_thread=False)
    assert text in await t.invoke("{}")


class _CountingModules(dict[str, object]):
    lookups = 0

    def get(self, key: str, default: object = None) -> object:
        self.lookups += 1
        return super().get(key, default)


def test_the_pydantic_lookup_is_once_per_result_not_per_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each object msgspec cannot encode (a ``Path`` among 100k) looked pydantic up in
    ``sys.modules`` again: the encoding took 2.5 times as long."""
    import types

    import agentflow._tool_text as tool_text

    modules = _CountingModules(sys.modules)
    monkeypatch.setattr(tool_text, "sys", types.SimpleNamespace(modules=modules))
    paths = [Path(f"/tmp/x{i}") for i in range(1000)]
    assert (
        tool_text.to_text(paths, tool="ls") == msgspec.json.encode(list(map(str, paths))).decode()
    )
    assert tool_text.to_text([Hit(path="a", line=1)], tool="ls") == '[{"path":"a","line":1}]'
    assert modules.lookups == 2
