"""The SSE splitter yields exactly the data payloads, however the bytes are cut into reads."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from agentflow.transport import SSEDecoder


def feed_all(reads: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    for r in reads:
        out += dec.feed(r)
    return out + dec.flush()


def test_one_data_line_per_event() -> None:
    """The common vLLM shape: `data: {json}` then a blank line."""
    assert feed_all([b'data: {"a":1}\n\ndata: {"b":2}\n\n']) == [b'{"a":1}', b'{"b":2}']


def test_comments_and_other_fields_are_skipped() -> None:
    """Keep-alive comments, `event:` and `id:` lines carry nothing a chat stream needs."""
    body = b': ping\n\nevent: message\nid: 7\ndata: {"x":1}\n\n: keep-alive\n\n'
    assert feed_all([body]) == [b'{"x":1}']


def test_multiline_data_is_joined_with_newline() -> None:
    """Several `data:` lines in one event make one payload, joined by LF."""
    assert feed_all([b"data: a\ndata: b\n\n"]) == [b"a\nb"]


def test_data_without_space_after_colon() -> None:
    """The space after `data:` is optional in the SSE grammar."""
    assert feed_all([b"data:{}\n\n"]) == [b"{}"]


def test_crlf_and_cr_line_ends() -> None:
    """CRLF and lone CR end lines too, even when a CRLF is cut between reads."""
    assert feed_all([b"data: 1\r\n\r", b"\ndata: 2\r\r"]) == [b"1", b"2"]


def test_last_event_without_blank_line_is_flushed() -> None:
    """A stream that closes right after its last line still yields that payload."""
    assert feed_all([b"data: 1\n\ndata: [DONE]"]) == [b"1", b"[DONE]"]


def test_pending_counts_held_back_bytes() -> None:
    """Bytes of an unfinished event wait in the buffer."""
    dec = SSEDecoder()
    assert dec.feed(b"data: {partial") == []
    assert dec.pending == len(b"data: {partial")
    assert dec.feed(b"}\n\n") == [b"{partial}"]
    assert dec.pending == 0


_payload = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"\n" not in b and b"\r" not in b and not b.startswith(b" ")
)


@given(
    payloads=st.lists(_payload, min_size=1, max_size=20),
    crlf=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
)
def test_any_split_into_reads_gives_the_same_payloads(
    payloads: list[bytes], crlf: bool, cuts: list[int]
) -> None:
    """Cutting the byte stream anywhere — mid-line, mid-CRLF — never changes the payloads."""
    nl = b"\r\n" if crlf else b"\n"
    stream = b"".join(b": c" + nl + b"data: " + p + nl + nl for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reads = [stream[a:b] for a, b in itertools.pairwise(points)]
    assert feed_all(reads) == payloads


BOM = b"\xef\xbb\xbf"


def test_a_bom_at_the_start_is_dropped_however_the_reads_cut_it() -> None:
    """One UTF-8 BOM may start a stream (WHATWG "event stream interpretation"): it was
    taken as part of the first line's field name ("\\ufeffdata"), so the first event was
    dropped. Its three bytes may come in separate reads, with or without CRLF line ends."""
    for body in (b'data: {"a":1}\n\ndata: 2\n\n', b'data: {"a":1}\r\n\r\ndata: 2\r\n\r\n'):
        stream = BOM + body
        for a in range(len(BOM) + 2):
            for b in range(a, len(BOM) + 3):
                reads = [stream[:a], stream[a:b], stream[b:]]
                assert feed_all(reads) == [b'{"a":1}', b"2"], reads


def test_only_one_bom_and_only_at_the_start_is_dropped() -> None:
    """A second BOM, or one after the first byte, is data: the line it starts is no
    ``data`` field (as the spec has it)."""
    assert feed_all([BOM + BOM + b"data: 1\n\ndata: 2\n\n"]) == [b"2"]
    assert feed_all([b"data: 1\n\n" + BOM + b"data: 2\n\ndata: 3\n\n"]) == [b"1", b"3"]
    assert feed_all([b"data: " + BOM + b"x\n\n"]) == [BOM + b"x"]  # in a value: data
    assert feed_all([BOM[:2] + b"data: 1\n\n"]) == []  # half a BOM is no BOM
    assert feed_all([BOM[:2]]) == [] and feed_all([BOM]) == []


def test_pending_counts_the_start_of_a_bom() -> None:
    dec = SSEDecoder()
    assert dec.feed(BOM[:2]) == []
    assert dec.pending == 2
    assert dec.feed(BOM[2:] + b"data: 1\n\n") == [b"1"]
    assert dec.pending == 0


@given(
    payloads=st.lists(_payload, min_size=1, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=10),
)
def test_a_leading_bom_never_changes_the_payloads(payloads: list[bytes], cuts: list[int]) -> None:
    stream = BOM + b"".join(b"data: " + p + b"\n\n" for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reads = [stream[a:b] for a, b in itertools.pairwise(points)]
    assert feed_all(reads) == payloads
