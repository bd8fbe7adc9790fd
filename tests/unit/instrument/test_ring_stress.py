"""Eight threads and two forked processes, 1M events each, through the real runtime."""

from __future__ import annotations

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


def check_consistent(events: np.ndarray) -> None:
    """Every returned slot is one writer's whole event, and each writer's order is kept."""
    writer = events["id"] >> np.uint64(32)
    index = events["id"] & np.uint64(0xFFFFFFFF)
    assert (writer < WRITERS).all() and (index < PER_WRITER).all()
    assert (events["kind"] == 1 + (index & np.uint64(1))).all()
    assert (np.diff(events["pos"].astype(np.int64)) > 0).all()
    for w in range(WRITERS):
        mine = events[writer == w]
        i = mine["id"] & np.uint64(0xFFFFFFFF)
        assert (np.diff(i.astype(np.int64)) > 0).all(), f"writer {w}: order broken or duplicated"
        assert (np.diff(mine["ts"].astype(np.int64)) >= 0).all(), f"writer {w}: timestamps go back"


def test_big_ring_loses_nothing(stress_binary, build_env, shm_name):
    create_ring(shm_name, 1 << 24)  # 16 Mi slots > 10 M events
    with RingReader(shm_name) as reader:
        run([str(stress_binary), str(THREADS), str(FORKS), str(PER_WRITER)], stress_binary.parent,
            {**build_env, "MALLORY_SHM": shm_name})
        events, lost = reader.poll()
        assert lost == 0 and reader.lost_total == 0 and reader.torn_total == 0
        assert len(events) == TOTAL == reader.write_counter
        check_consistent(events)
        for w in range(WRITERS):
            mine = events[(events["id"] >> np.uint64(32)) == w]
            assert (mine["id"] & np.uint64(0xFFFFFFFF)).tolist() == list(range(PER_WRITER))


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
                assert (got["ts"] >= np.uint64(bound)).all()
                bound = reader.complete_until_ns
                chunks.append(got)
                time.sleep(0.0005)
        finally:
            proc.wait(timeout=300)
        assert proc.returncode == 0
        chunks.append(reader.poll().events)
        events = np.concatenate(chunks)
        assert reader.write_counter == TOTAL
        assert reader.cursor == TOTAL
        # Exact accounting: every claimed position was either returned once or counted lost.
        assert len(events) + reader.lost_total == TOTAL
        assert reader.lost_total > 0
        check_consistent(events)
        # The header shows what the reader published.
        assert reader.published == (TOTAL, reader.lost_total)
