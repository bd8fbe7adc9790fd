"""RingReader against hand-written slots (a fake writer following RING.md), creation and errors."""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

from mallory.errors import MalloryError
from mallory.observer.ring import (
    HEADER_SIZE,
    RingBacklog,
    RingReader,
    create_ring,
    ring,
    shm_path,
    slot_check,
    unlink_ring,
)
from mallory.timeline.event import Event, Kind

from .ring_writer import FakeWriter


def ids(events: list[tuple[int, int, int, int]]) -> list[int]:
    return [ident for _, ident, _, _ in events]


@pytest.fixture
def small_ring(shm_name):
    create_ring(shm_name, 8)
    writer = FakeWriter(shm_name)
    reader = RingReader(shm_name, node="n2", stall_timeout=0.05)
    yield writer, reader
    reader.close()
    writer.close()


def test_returns_events_in_order_and_as_event_objects(small_ring):
    writer, reader = small_ring
    for i in range(5):
        writer.event(100 + i, 2**64 - 1 - i, 1 + i % 2)
    events, lost = reader.poll()
    assert lost == 0
    assert events == [(100 + i, 2**64 - 1 - i, 1 + i % 2, i) for i in range(5)]  # (ts, id, kind, pos)
    assert reader.poll().events == []
    writer.event(200, 7, 2)
    assert reader.poll_events() == [Event("n2", Kind.BLOCK, 200, 7)]


def test_a_bounded_poll_says_when_it_left_events_behind(small_ring):
    writer, reader = small_ring
    for i in range(5):
        writer.event(10 + i, i)
    assert ids(reader.poll(3).events) == [0, 1, 2] and reader.truncated
    assert ids(reader.poll(2).events) == [3, 4] and not reader.truncated  # exactly the rest
    pos = writer.claim()  # pending: it stops the next poll before its limit
    writer.event(20, 6)
    assert reader.poll(1).events == [] and not reader.truncated and reader.cursor == pos


def test_backlog_hands_out_events_older_than_a_bound_in_ts_order(small_ring):
    writer, reader = small_ring
    backlog = RingBacklog(reader)
    for ts, ident in ((30, 1), (10, 2), (50, 3), (20, 4)):  # ring order is not ts order
        writer.event(ts, ident)
    backlog.read(3)
    assert backlog.truncated and len(backlog) == 3
    assert sorted(backlog.ts_before(40)) == [10, 30]
    assert backlog.take_before(40) == [Event("n2", Kind.FUNC, 10, 2), Event("n2", Kind.FUNC, 30, 1)]
    backlog.read(3)
    assert not backlog.truncated and sorted(backlog.ts_before(2**63)) == [20, 50]
    assert backlog.complete_until_ns == reader.complete_until_ns > 0
    assert [e.id for e in backlog.take_before(60)] == [4, 3]
    assert len(backlog) == 0 and backlog.take_before(2**63) == []
    writer.event(70, 5)
    backlog.read(8)
    assert backlog.discard() == 1 and backlog.ts_before(2**63) == []


def test_waiting_events_are_kept_packed(shm_name):
    # A burst read in steps can wait in the backlog whole (up to the ring's capacity, see
    # RingBacklog): 32 bytes an event there, not a tuple's ~180.
    n = 1 << 14
    create_ring(shm_name, n)
    writer = FakeWriter(shm_name)
    writer.events([(2**40 + p, 2**63 + p, 1) for p in range(n)])
    with RingReader(shm_name, node="n1") as reader:
        backlog = RingBacklog(reader)
        tracemalloc.start()
        try:
            backlog.read(n)
            kept = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(backlog) == n and kept < 48 * n
        assert backlog.take_before(2**40 + 2) == [Event("n1", Kind.FUNC, 2**40, 2**63), Event("n1", Kind.FUNC, 2**40 + 1, 2**63 + 1)]
    writer.close()


def test_laps_are_counted_exactly(small_ring):
    writer, reader = small_ring
    for i in range(20):  # capacity 8: positions 0..11 are overwritten
        writer.event(i, i)
    events, lost = reader.poll()
    assert lost == 12 and ids(events) == list(range(12, 20))
    assert reader.published == (20, 12)


def test_torn_slot_is_never_returned(small_ring):
    writer, reader = small_ring
    writer.event(1, 1)
    pos = writer.claim()
    writer.write_slot(pos, 2, 2, 1, check=12345)  # fields that do not belong together
    writer.event(3, 3)
    events, lost = reader.poll()
    assert ids(events) == [1, 3]
    assert lost == 1 and reader.torn_total == 1


def test_unfinished_slot_waits_then_is_given_up_after_the_stall_timeout(small_ring):
    writer, reader = small_ring
    writer.event(1, 1)
    pos = writer.claim()
    writer.write_slot(pos, 2, 2, 1, stamp=((pos + 1) << 1) | 1)  # busy: writer still at it
    writer.event(3, 3)
    events, lost = reader.poll()
    assert ids(events) == [1] and lost == 0 and reader.cursor == 1
    writer.write_slot(pos, 2, 2, 1)  # the writer finishes
    assert ids(reader.poll().events) == [2, 3]
    pos = writer.claim()  # claimed, then the writer dies before touching the slot
    writer.event(5, 5)
    assert reader.poll().events == []
    time.sleep(0.06)
    events, lost = reader.poll()
    assert ids(events) == [5] and lost == 1


def test_overwritten_while_reading_counts_as_lost(small_ring):
    writer, reader = small_ring
    writer.event(1, 1)
    writer.write_slot(0 + 8, 9, 9, 1)  # a later lap already took slot 0 (counter not yet past)
    events, lost = reader.poll()
    assert events == [] and lost == 1


def test_slot_check_is_the_runtimes():
    # values printed by mallory_slot_check() of llvm-pass/runtime/mallory_ring.h, compiled by cc
    assert slot_check(123456789012345, 0xFEDCBA9876543210, 2, 1 << 40) == 0xFA1E426A
    assert slot_check(2**64 - 1, 2**64 - 1, 2**32 - 1, 2**64 - 1) == 0xE113025B


def test_a_chunk_with_unsettled_stamps_is_classified_slot_by_slot_up_to_the_first_pending(small_ring):
    # Not every stamp is final, so the reader takes its slot-by-slot path (the other one only
    # checks): whole, torn and overwritten slots before the pending one are decided.
    writer, reader = small_ring
    writer.event(1, 1)
    pos = writer.claim()
    writer.write_slot(pos, 2, 2, 1, check=12345)  # torn
    pos = writer.claim()
    writer.write_slot(pos + 8, 3, 3, 1)  # a later lap's writer took the slot
    writer.event(4, 4)
    pending = writer.claim()
    writer.write_slot(pending, 5, 5, 1, stamp=((pending + 1) << 1) | 1)
    writer.event(6, 6)
    events, lost = reader.poll()
    assert events == [(1, 1, 1, 0), (4, 4, 1, 3)] and lost == 2 and reader.torn_total == 1
    assert reader.cursor == pending
    writer.write_slot(pending, 5, 5, 1)
    assert reader.poll() == ([(5, 5, 1, 4), (6, 6, 1, 5)], 0)


def test_create_ring_validates_and_refuses_to_clobber(shm_name):
    with pytest.raises(MalloryError, match="power of two"):
        create_ring(shm_name, 1000)
    path = create_ring(shm_name, 16)
    assert os.path.getsize(path) == HEADER_SIZE + 16 * 32
    with pytest.raises(MalloryError, match="already exists"):
        create_ring(shm_name, 16)
    create_ring(shm_name, 32, exist_ok=True)
    with RingReader(shm_name) as reader:
        assert reader.capacity == 32
    unlink_ring(shm_name)
    assert not os.path.exists(path)
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(shm_name)]


def test_reader_rejects_missing_and_foreign_segments(shm_name):
    with pytest.raises(MalloryError, match="no shared-memory ring"):
        RingReader(shm_name)
    with open(shm_path(shm_name), "wb") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(MalloryError, match="bad magic"):
        RingReader(shm_name)
    with pytest.raises(MalloryError, match="invalid shared-memory name"):
        shm_path("a/b")


def test_ring_context_manager_unlinks(shm_name):
    with ring(shm_name, 4) as path:
        assert os.path.exists(path)
    assert not os.path.exists(path)


def test_start_now_skips_earlier_events(small_ring, shm_name):
    writer, _ = small_ring
    writer.event(1, 1)
    with RingReader(shm_name, start="now") as late:
        writer.event(2, 2)
        assert ids(late.poll().events) == [2]


def test_completeness_bound_waits_for_unfinished_positions(small_ring):
    writer, reader = small_ring
    assert reader.complete_until_ns == 0
    writer.event(1, 1)
    before = time.monotonic_ns()
    reader.poll()
    first_bound = reader.complete_until_ns
    assert first_bound >= before
    pos = writer.claim()  # claimed after that poll: its ts will be >= first_bound
    writer.event(3, 3)
    reader.poll()
    assert reader.cursor == pos and reader.complete_until_ns == first_bound
    writer.write_slot(pos, first_bound, 2, 1)
    before = time.monotonic_ns()
    assert ids(reader.poll().events) == [2, 3]
    assert reader.complete_until_ns >= before


def test_python_writer_through_the_shared_runtime(tc, shm_name):
    """Python-level instrumentation can write through libmallory_rt.so with event_ids' ids."""
    import subprocess
    import sys

    from mallory.instrument.event_ids import event_id

    create_ring(shm_name, 64)
    code = (
        "import ctypes, sys\n"
        "from mallory.instrument.event_ids import event_id\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "lib.__mallory_event.argtypes = (ctypes.c_uint64, ctypes.c_uint32)\n"
        "for line in (12, 30):\n"
        "    lib.__mallory_event(event_id('app/raft.py', line, 'FUNC'), 1)\n"
    )
    env = {**os.environ, "MALLORY_SHM": shm_name}
    with RingReader(shm_name, node="py") as reader:
        subprocess.run([sys.executable, "-c", code, str(tc.runtime_shared)], env=env, check=True)
        events = reader.poll_events()
    assert [(e.kind, e.id) for e in events] == [
        (Kind.FUNC, event_id("app/raft.py", 12, "FUNC")), (Kind.FUNC, event_id("app/raft.py", 30, "FUNC"))]


def _resident_kb(path: str) -> int:
    """Rss of every mapping of `path` in this process (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=6)
            if "-" in first[0] and len(first) >= 5 and ":" in first[3]:  # a mapping's header line
                inside = len(first) == 6 and first[5].strip() == path
            elif inside and line.startswith("Rss:"):
                total += int(first[1])
    return total


def test_read_slots_leave_the_readers_resident_set(shm_name):
    # A reader that kept every page it read would hold the whole ring after one lap (32 MiB by
    # default): consumed pages are released, and their events are still read right.
    capacity = 1 << 15  # 1 MiB of slots
    create_ring(shm_name, capacity)
    writer = FakeWriter(shm_name)
    reader = RingReader(shm_name, node="n1")
    try:
        seen = 0
        for lap in range(3):
            n = capacity // 4
            for _ in range(4):
                writer.events([(p + 1, p, 1) for p in range(seen, seen + n)])
                got = reader.poll()
                assert got.lost == 0 and ids(got.events) == list(range(seen, seen + n))
                seen += n
                # what stays: the header's page, a cut page, and what the kernel maps around a
                # fault (64 KiB by default); a quarter of the ring (256 KiB) was just read
                assert _resident_kb(shm_path(shm_name)) <= 128
    finally:
        reader.close()
        writer.close()
        unlink_ring(shm_name)
