"""Eight threads and two forked processes, 1M events each, through the real runtime."""

from __future__ import annotations

import itertools
import subprocess
import time

import numpy as np
import pytest

from mallory.observer.ring import RingReader, create_ring
from tests.unit.instrument.llvm_helpers import SAMPLES, run

THREADS, FORKS, PER_WRITER = 8, 2, 1_000_000
WRITERS = THREADS + FORKS
TOTAL = WRITERS * PER_WRITER


@pytest.fixture(scope="module")
def stress_binary(tc, tmp_path_factory):
    out = tmp_path_factory.mktemp("stress") / "stress"
    subprocess.run([str(tc.cc), "-O2", "-o", str(out), str(SAMPLES / "stress" / "stress.c"), str(tc.runtime),
                    "-lpthread"], check=True)
    return out


def rows(events: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Poll results as an (n, 4) array of ts, id, kind, pos: 32 bytes an event, not the
    ~180 of its tuple (10M events here)."""
    flat = np.fromiter(itertools.chain.from_iterable(events), np.uint64, 4 * len(events))
    return flat.reshape(-1, 4)


def poll_rows(reader: RingReader) -> tuple[np.ndarray, int]:
    """Everything written so far, polled in bounded pieces (each kept as rows at once)."""
    pieces, lost = [], 0
    while True:
        got = reader.poll(1 << 16)
        pieces.append(rows(got.events))
        lost += got.lost
        if not reader.truncated:
            return np.concatenate(pieces), lost


def check_consistent(events: np.ndarray) -> None:
    """Every returned slot is one writer's whole event, and each writer's order is kept."""
    ts, ident, kind, pos = events.T
    writer = ident >> np.uint64(32)
    index = ident & np.uint64(0xFFFFFFFF)
    assert (writer < WRITERS).all() and (index < PER_WRITER).all()
    assert (kind == 1 + (index & np.uint64(1))).all()
    assert (np.diff(pos.astype(np.int64)) > 0).all()
    for w in range(WRITERS):
        mine = writer == w
        assert (np.diff(index[mine].astype(np.int64)) > 0).all(), f"writer {w}: order broken or duplicated"
        assert (np.diff(ts[mine].astype(np.int64)) >= 0).all(), f"writer {w}: timestamps go back"


def test_big_ring_loses_nothing(stress_binary, build_env, shm_name):
    create_ring(shm_name, 1 << 24)  # 16 Mi slots > 10 M events
    with RingReader(shm_name) as reader:
        run([str(stress_binary), str(THREADS), str(FORKS), str(PER_WRITER)], stress_binary.parent,
            {**build_env, "MALLORY_SHM": shm_name})
        events, lost = poll_rows(reader)
        assert lost == 0 and reader.lost_total == 0 and reader.torn_total == 0
        assert len(events) == TOTAL == reader.write_counter
        check_consistent(events)
        ident = events[:, 1]
        for w in range(WRITERS):
            assert (ident[(ident >> np.uint64(32)) == w] & np.uint64(0xFFFFFFFF)).tolist() == list(range(PER_WRITER))


def test_small_ring_counts_every_lost_event_and_returns_no_torn_slot(stress_binary, build_env, shm_name):
    create_ring(shm_name, 1 << 12)
    chunks = []
    with RingReader(shm_name) as reader:
        proc = subprocess.Popen([str(stress_binary), str(THREADS), str(FORKS), str(PER_WRITER)],
                                env={**build_env, "MALLORY_SHM": shm_name})
        try:
            bound = reader.complete_until_ns
            while proc.poll() is None:
                got = reader.poll().events
                # Everything not returned by the previous poll was promised to be >= its bound.
                assert all(e[0] >= bound for e in got)
                bound = reader.complete_until_ns
                chunks.append(rows(got))
                time.sleep(0.0005)
        finally:
            proc.wait(timeout=300)
        assert proc.returncode == 0
        chunks.append(rows(reader.poll().events))
        events = np.concatenate(chunks)
        assert reader.write_counter == TOTAL
        assert reader.cursor == TOTAL
        # Exact accounting: every claimed position was either returned once or counted lost.
        assert len(events) + reader.lost_total == TOTAL
        assert reader.lost_total > 0
        check_consistent(events)
        # The header shows what the reader published.
        assert reader.published == (TOTAL, reader.lost_total)
