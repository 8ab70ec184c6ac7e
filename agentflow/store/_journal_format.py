"""The journal's format on disk: a segment's header, its frames and their kinds, and the
``meta`` key that holds how much of a segment SQLite has. What writes it is
``store/_journal.py``; what reads a killed writer's back, ``store/_journal_ingest.py``.

A segment is an 8-byte header — its format's version (:data:`_VERSION`) and the id of
the database it was written for (:func:`header`) —, then frames: payload length and
CRC-32 (:data:`_FRAME`), then the payload, MessagePack of ``(kind, value)``.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import msgspec

from agentflow.store._records import (
    AgentInfo,
    PolicyState,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    TurnFinished,
)

__all__ = ["header", "marker_key", "session_frames"]

#: A segment's format's version: the first 4 bytes of its header. AFJ5's header holds,
#: in its other 4, the id of the database it was written for (kept in ``meta``): a
#: segment left beside a new database at the same path is not ingested into it.
_VERSION = b"AFJ5"
#: A header with no database's id: the header's size (the first frame's offset).
_MAGIC = _VERSION + bytes(4)
#: The headers of the earlier formats this version reads, which carry no id: AFJ4's (the
#: frames AFJ5 writes), AFJ3's (agents' frames hold their prompt) and AFJ2's (no agent or
#: session-reference frames), so that a journal left by a killed run of an earlier
#: release is ingested (beside a database that existed before the open: not one it
#: creates). An older release refuses a newer segment by its header (a ``StoreError``
#: naming it).
_LEGACY = (b"AFJ4\0\0\0\0", b"AFJ3\0\0\0\0", b"AFJ2\0\0\0\0")


def header(db_id: bytes) -> bytes:
    """The header of a segment written for the database whose id is ``db_id`` (4 bytes)."""
    return _VERSION + db_id


_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload
_KINDS: tuple[type[Any], ...] = (
    TurnFinished,
    ToolFinished,
    SessionStarted,
    SessionEnded,
    RunStarted,
    RunEnded,
    PolicyState,
)
_KIND = {k: i for i, k in enumerate(_KINDS)}
#: Frame kinds past the records': a turn's row, a tool result's (``_sqlite_io.prepare``).
_ROWS = len(_KINDS)
#: A session start that refers to its agent's frame, ``(ref, SessionStarted)`` with
#: :data:`_NO_AGENT` in its place; an agent, written once per segment, ``(ref, text ref,
#: AgentInfo)`` with its instructions in a text's frame, ``(text ref, text)``, written once
#: per segment too. A fleet's sessions share a few agents, and its agents a few system
#: prompts of tens of KB: copied into every session's frame, the demo's 64 prompts were
#: half of its journal, and into every agent's frame 86% of it. ``(ref, AgentInfo)``, an
#: agent with its prompt, is AFJ3's agent frame (read, no longer written).
_AGENT, _SESSION, _TEXT, _AGENT_TEXT = _ROWS + 2, _ROWS + 3, _ROWS + 4, _ROWS + 5
_NO_AGENT = AgentInfo(name="", fingerprint="", instructions="", config={})
_encoder = msgspec.msgpack.Encoder()
_frame_decoder = msgspec.msgpack.Decoder(tuple[int, msgspec.Raw])
_decoders = [msgspec.msgpack.Decoder(k) for k in _KINDS]
_row_decoder = msgspec.msgpack.Decoder(tuple[Any, ...])
_agent_decoder = msgspec.msgpack.Decoder(tuple[int, AgentInfo])
_session_decoder = msgspec.msgpack.Decoder(tuple[int, SessionStarted])
_text_decoder = msgspec.msgpack.Decoder(tuple[int, str])
_agent_text_decoder = msgspec.msgpack.Decoder(tuple[int, int, AgentInfo])


def marker_key(name: str) -> str:
    """The ``meta`` key that holds how much of the segment ``name`` SQLite has."""
    return f"journal:{name}"


def session_frames(
    agents: dict[int, tuple[int, AgentInfo]],
    texts: dict[str, int],
    agent: AgentInfo,
    stub: SessionStarted,
) -> tuple[list[bytes], int | None, int | None]:
    """The frames of a session start in a segment that holds ``agents`` (``id`` of each
    ``AgentInfo`` -> its ref and it) and ``texts`` (text -> its ref): its agent's
    instructions' text and its agent, unless the segment holds them, then the session's
    (``stub``: the session start with :data:`_NO_AGENT`); with the agent's ref and the
    text's ref when their frames are among them."""
    known = agents.get(id(agent))
    if known is not None:
        return [_encoder.encode((_SESSION, (known[0], stub)))], None, None
    frames = []
    text = texts.get(agent.instructions)
    new_text = None
    if text is None:
        text = new_text = len(texts)
        frames.append(_encoder.encode((_TEXT, (text, agent.instructions))))
    ref = len(agents)
    bare = dataclasses.replace(agent, instructions="")
    frames.append(_encoder.encode((_AGENT_TEXT, (ref, text, bare))))
    frames.append(_encoder.encode((_SESSION, (ref, stub))))
    return frames, ref, new_text
