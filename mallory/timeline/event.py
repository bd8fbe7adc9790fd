"""The event model shared by every stage (DESIGN.md, "Event").

An `Event` is one observation on one node: a code event reached by the instrumented SUT,
a packet sent or received, a client operation, a fault, a log line, a window marker.
Observers group a node's events into `Batch`es with a per-node sequence number; each
observer also sends one `ClockPair` so its monotonic timestamps can be placed on the
common (real-time) axis.
"""

from __future__ import annotations

import re
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
    data: a short abstraction of the payload: for a packet, the hex of its first 4
          payload bytes, or on a TCP flow whose messages the SUT declares
          (mallory/observer/messages.py) the type names of the messages it starts (see
          `message_types`) followed by BYTES_SEPARATOR and what the data would have been
          without the declaration ("append-entries#0d000000": `message_part`,
          `bytes_part`), so one recording can be judged both ways; "f:type" of a client
          op, a fault's name. Kept small: it is part of the state.
    """

    node: str
    kind: Kind
    ts: int
    id: int
    data: str = ""


#: A packet's data when it carries the middle or the end of a message (or TCP write) only.
CONTINUATION = "cont"
#: A packet's data on a declared flow whose message boundaries are unknown there (the
#: flow was joined mid-stream or lost sync; mallory/observer/framing.py).
UNKNOWN_MESSAGE = "?"
#: Message type names a packet starts are joined with this, sorted, each name once.
MESSAGE_SEPARATOR = "+"
#: A packet's data lists no more message type names than fit in this many characters.
MAX_MESSAGE_DATA = 96
#: On a declared flow a packet's data is "<message part>#<bytes part>" (see `Event`).
BYTES_SEPARATOR = "#"
#: A message type name: 1 to 32 of these characters, not only lowercase hex digits (or it
#: would read as payload hex) and not CONTINUATION.
MESSAGE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,32}")
_PAYLOAD_HEX = re.compile(r"[0-9a-f]*")


def is_message_name(name: str) -> bool:
    """Whether `name` may name a message type (`MESSAGE_NAME`)."""
    return bool(MESSAGE_NAME.fullmatch(name)) and not _PAYLOAD_HEX.fullmatch(name) and name != CONTINUATION


def message_data(names: list[str]) -> str:
    """A packet's data for the message type names it starts (in any order, repeats
    allowed): each name once, sorted, joined by MESSAGE_SEPARATOR, as many as fit in
    MAX_MESSAGE_DATA characters; CONTINUATION for none."""
    if not names:
        return CONTINUATION
    distinct = sorted(set(names))
    data = distinct[0]
    for name in distinct[1:]:
        if len(data) + 1 + len(name) > MAX_MESSAGE_DATA:
            break
        data += MESSAGE_SEPARATOR + name
    return data


def packet_data(messages: str, payload: str) -> str:
    """A declared flow's packet data: its message part (`message_data`, UNKNOWN_MESSAGE)
    and its bytes part, what the packet's data is without a declaration (payload hex or
    CONTINUATION; "" for none: then the data is the message part alone)."""
    return f"{messages}{BYTES_SEPARATOR}{payload}" if payload else messages


def message_part(data: str) -> str:
    """A SEND/RECV event's data as the SUT's message types name it: the part before
    BYTES_SEPARATOR (all of it when there is none: a flow without a declaration)."""
    return data.partition(BYTES_SEPARATOR)[0]


def bytes_part(data: str) -> str:
    """A SEND/RECV event's data as it would be without message types: the part after
    BYTES_SEPARATOR (all of it when there is none: already that)."""
    before, separator, after = data.partition(BYTES_SEPARATOR)
    return after if separator else before


def message_types(data: str) -> tuple[str, ...]:
    """The message type names a SEND/RECV event's data carries; () when it carries payload
    hex, CONTINUATION, UNKNOWN_MESSAGE or nothing (its bytes part is not looked at)."""
    data = message_part(data)
    if not data or data == CONTINUATION or _PAYLOAD_HEX.fullmatch(data):
        return ()
    names = tuple(data.split(MESSAGE_SEPARATOR))
    return names if all(map(is_message_name, names)) else ()


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
