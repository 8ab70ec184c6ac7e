"""A kernel stamp converted to the trace's clock is not made early by a pause.

The conversion reads the trace's clock and the real-time clock: the stamp is now less its
age. It read ``clock()``, then parsed the control message, then ``time.time_ns()``: a
pause between the two (the process descheduled) aged the stamp by the pause, and it came
out early by that much (a negative ITL is possible). Here the clocks are fakes on one
simulated timeline, and the pause is injected into the first real-time reading.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest

from agentflow.transport._kstamp import StampedSocket

OFFSET_NS = 1_700_000_000_000_000_000  # real time minus the trace's clock
PAUSE_NS = 5_000_000


class _World:
    """One timeline: each clock reading takes 1 µs; the first real-time reading is held
    up by ``PAUSE_NS`` first (descheduled there)."""

    def __init__(self) -> None:
        self.t = 1_000_000_000
        self.paused = False

    def clock(self) -> int:
        self.t += 1_000
        return self.t

    def realtime(self) -> int:
        if not self.paused:
            self.paused = True
            self.t += PAUSE_NS
        self.t += 1_000
        return self.t + OFFSET_NS


def test_a_pause_between_the_two_clock_readings_does_not_make_the_stamp_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = _World()
    arrived = world.t - 50_000  # on the trace's clock: 50 µs before the read
    kernel = arrived + OFFSET_NS
    payload = struct.pack("@qq", *divmod(kernel, 1_000_000_000))
    ancdata = [(socket.SOL_SOCKET, 35, payload)]  # SO_TIMESTAMPNS
    fake: Any = type("Fake", (), {"_clock": staticmethod(world.clock)})()
    monkeypatch.setattr(time, "time_ns", world.realtime)
    stamp = StampedSocket._arrival(fake, ancdata)
    monkeypatch.undo()
    assert abs(stamp - arrived) <= 20_000  # within the accepted bracket, not 5 ms early
