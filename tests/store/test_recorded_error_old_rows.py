"""An older release's ``repr(error)`` row reads back as the live error's text where the
repr allows it: a builtin exception's ``str`` as its class makes it (an OSError's
``[Errno 2] …``, a KeyError's quotes), others' as Exception's ``str`` of their arguments.
These used to read ``(2, 'No such file')`` and ``k``."""

from __future__ import annotations

import pytest

from agentflow.store._recorded_error import recorded_error


class Multi(Exception):
    pass


LIVE = {
    "oserror": OSError(2, "No such file"),
    "filenotfound": FileNotFoundError(2, "No such file"),
    "keyerror": KeyError("k"),
    "quoted": RuntimeError('it\'s "quoted"\nsecond line: x'),
    "empty": ValueError(),
    "two args": Multi("a", 3),
    "number": ValueError(5),
    "unicode": UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
}


@pytest.mark.parametrize("name", sorted(LIVE))
def test_an_older_repr_row_reads_back_as_the_live_text(name: str) -> None:
    error = LIVE[name]
    back = recorded_error(repr(error))  # what an older release stored
    assert (type(back).__name__, str(back)) == (type(error).__name__, str(error))


def test_what_the_repr_does_not_allow_is_kept_as_written() -> None:
    keywords = recorded_error("Foo(a=1, b='x')")
    assert (type(keywords).__name__, str(keywords)) == ("Foo", "a=1, b='x'")
    own = recorded_error("MyErr<code=5>")  # a class's own __repr__
    assert (type(own).__name__, str(own)) == ("Error", "MyErr<code=5>")
    wrong = recorded_error("OSError('a', 'b', 'c', 'd', 'e', 'f')")  # args it does not take
    assert type(wrong).__name__ == "OSError"
