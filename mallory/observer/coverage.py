"""AFL-style edge coverage: a 64 KiB hit-count bitmap in its own shared-memory segment.

A binary built with MALLORY_COV=1 bumps `bitmap[prev ^ cur]` on every basic block it enters
(cur: a stable 16-bit block id, prev: the previous block's id >> 1, per thread), into the
segment named by MALLORY_COV_SHM when it exists. It is a separate feedback from the
code-event ring, for campaigns to compare against Mallory's timeline states.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from mallory.errors import MalloryError
from mallory.observer.ring import shm_path

MAP_SIZE = 1 << 16
#: AFL's hit-count buckets: 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+.
_BUCKETS = np.array([0, 1, 2, 4] + [8] * 4 + [16] * 8 + [32] * 16 + [64] * 96 + [128] * 128, dtype=np.uint8)


def create_coverage_map(name: str, *, exist_ok: bool = False) -> str:
    path = shm_path(name)
    flags = os.O_CREAT | os.O_RDWR | (0 if exist_ok else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise MalloryError(f"coverage map {name!r} already exists ({path})") from None
    try:
        os.ftruncate(fd, MAP_SIZE)
    finally:
        os.close(fd)
    return path


def unlink_coverage_map(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(shm_path(name))


def read_coverage(name: str) -> np.ndarray:
    """The raw hit counts (uint8, wrapping) as a copy."""
    try:
        with open(shm_path(name), "rb") as f:
            raw = f.read(MAP_SIZE)
    except FileNotFoundError:
        raise MalloryError(f"no coverage map named {name!r}") from None
    return np.frombuffer(raw, dtype=np.uint8).copy()


def reset_coverage(name: str) -> None:
    with open(shm_path(name), "r+b") as f:
        f.write(b"\0" * MAP_SIZE)


def bucketed(counts: np.ndarray) -> np.ndarray:
    """Counts folded into AFL's buckets, so loops that run a few more times look the same."""
    return _BUCKETS[counts]


def new_edges(counts: np.ndarray, virgin: np.ndarray) -> int:
    """How many (edge, bucket) bits `counts` shows that `virgin` (accumulated) has not; updates it."""
    bits = bucketed(counts)
    fresh = bits & ~virgin
    virgin |= bits
    return int(np.unpackbits(fresh).sum())
