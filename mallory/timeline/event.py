"""The event model shared by every stage (DESIGN.md, "Event").

An `Event` is one observation on one node: a code event reached by the instrumented SUT,
a packet sent or received, a client operation, a fault, a log line, a window marker.
Observers group a node's events into `Batch`es with a per-node sequence number; each
observer also sends one `ClockPair` so its monotonic timestamps can be placed on the
common (real-time) axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


class Kind(IntEnum):
    """What an event is. The numbers are part of the shared-memory ring format too."""

    FUNC = 1
    BLOCK = 2
    SEND = 3
    RECV = 4
    CLIENT_INVOKE = 5
    CLIENT_COMPLETE = 6
    FAULT = 7
    WINDOW_START = 8
    WINDOW_END = 9
    LOG = 10


KIND_BY_NAME: dict[str, Kind] = {k.name: k for k in Kind}
KIND_BY_VALUE: dict[int, Kind] = {int(k): k for k in Kind}

#: The largest id an event may carry: ids are unsigned 64-bit (code-event hashes, packet ids).
MAX_ID = 2**64 - 1


class Event(NamedTuple):
    """One observation.

    node: the node's name ("n1").
    kind: see `Kind`.
    ts:   the node's monotonic clock in ns when it happened.
    id:   a code-event id (stable hash of path, line, kind), a 64-bit packet id, or 0.
    data: a short abstraction of the payload: hex of a packet's first 4 payload bytes,
          "f:type" of a client op, a fault's name. Kept small: it is part of the state.
    """

    node: str
    kind: Kind
    ts: int
    id: int
    data: str = ""


@dataclass(frozen=True)
class ClockPair:
    """A node's monotonic and real-time clocks read together, to map one onto the other."""

    node: str
    mono_ns: int
    real_ns: int

    def to_real(self, mono_ns: int) -> int:
        return mono_ns - self.mono_ns + self.real_ns


@dataclass
class Batch:
    """What an observer sends every batch interval.

    seq:      per-node sequence number, from 0, no gaps; batches may arrive out of order.
    until_ns: the node's monotonic time up to which this batch is complete: the node
              promises that no later batch holds an event with ts < until_ns. It lets the
              timeline advance past an idle node.
    lost:     events the node knows it lost since the previous batch (ring laps, buffer
              overflow while the mediator was away).
    """

    node: str
    seq: int
    until_ns: int
    events: list[Event] = field(default_factory=list)
    lost: int = 0
