"""A fake ring writer for unit tests of ring readers (tests/unit/observer)."""

from __future__ import annotations

import os

import numpy as np

from mallory.observer.ring import HEADER_SIZE, SLOT_DTYPE, shm_path, slot_check


class FakeWriter:
    """Writes slots the way the C runtime does, one step at a time, so tests can stop midway."""

    def __init__(self, name: str) -> None:
        fd = os.open(shm_path(name), os.O_RDWR)
        self.fd = fd
        self.capacity = int(np.frombuffer(os.pread(fd, 8, 16), "<u8")[0])

    def claim(self) -> int:
        counter = int(np.frombuffer(os.pread(self.fd, 8, 64), "<u8")[0])
        os.pwrite(self.fd, np.uint64(counter + 1).tobytes(), 64)
        return counter

    def write_slot(self, pos: int, ts: int, ident: int, kind: int, *, stamp: int | None = None,
                   check: int | None = None) -> None:
        slot = np.zeros(1, SLOT_DTYPE)
        slot["ts"], slot["id"], slot["kind"] = ts, ident, kind
        p = np.array([pos], np.uint64)
        slot["check"] = slot_check(slot["ts"], slot["id"], slot["kind"], p)[0] if check is None else check
        slot["stamp"] = ((pos + 1) << 1) if stamp is None else stamp
        os.pwrite(self.fd, slot.tobytes(), HEADER_SIZE + (pos % self.capacity) * 32)

    def event(self, ts: int, ident: int, kind: int = 1) -> int:
        pos = self.claim()
        self.write_slot(pos, ts, ident, kind)
        return pos

    def close(self) -> None:
        os.close(self.fd)
