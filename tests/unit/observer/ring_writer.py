"""A fake ring writer for unit tests of ring readers (tests/unit/observer)."""

from __future__ import annotations

import os
import struct

from mallory.observer.ring import (
    HEADER_SIZE,
    SLOT_FORMAT,
    SLOT_SIZE,
    shm_path,
    slot_check,
)

_SLOT = struct.Struct(SLOT_FORMAT)
_U64 = struct.Struct("<Q")


def slot_bytes(pos: int, ts: int, ident: int, kind: int, *, stamp: int | None = None, check: int | None = None) -> bytes:
    """The 32 bytes of the slot of position `pos` (RING.md "Slot"), whole unless told otherwise."""
    return _SLOT.pack(ts, ident, kind, slot_check(ts, ident, kind, pos) if check is None else check,
                      ((pos + 1) << 1) if stamp is None else stamp)


class FakeWriter:
    """Writes slots the way the C runtime does, one step at a time, so tests can stop midway."""

    def __init__(self, name: str) -> None:
        fd = os.open(shm_path(name), os.O_RDWR)
        self.fd = fd
        self.capacity = _U64.unpack(os.pread(fd, 8, 16))[0]

    def claim(self) -> int:
        counter = _U64.unpack(os.pread(self.fd, 8, 64))[0]
        os.pwrite(self.fd, _U64.pack(counter + 1), 64)
        return counter

    def write_slot(self, pos: int, ts: int, ident: int, kind: int, *, stamp: int | None = None,
                   check: int | None = None) -> None:
        os.pwrite(self.fd, slot_bytes(pos, ts, ident, kind, stamp=stamp, check=check),
                  HEADER_SIZE + (pos % self.capacity) * SLOT_SIZE)

    def event(self, ts: int, ident: int, kind: int = 1) -> int:
        pos = self.claim()
        self.write_slot(pos, ts, ident, kind)
        return pos

    def events(self, events: list[tuple[int, int, int]]) -> int:
        """Write whole (ts, id, kind) events (at most a lap of them) at the next positions in one go (slots first, then
        the counter past them: as if their writers were done before a reader looked); returns
        the first position."""
        first = _U64.unpack(os.pread(self.fd, 8, 64))[0]
        slot = first % self.capacity
        data = b"".join(slot_bytes(first + i, *e) for i, e in enumerate(events))
        head = min(len(events), self.capacity - slot) * SLOT_SIZE  # up to the ring's end, the rest from slot 0
        os.pwrite(self.fd, data[:head], HEADER_SIZE + slot * SLOT_SIZE)
        if head < len(data):
            os.pwrite(self.fd, data[head:], HEADER_SIZE)
        os.pwrite(self.fd, _U64.pack(first + len(events)), 64)
        return first

    def close(self) -> None:
        os.close(self.fd)
