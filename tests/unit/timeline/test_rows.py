"""EntryRows, the mediator's compact bounded buffer: windows as EntryBuffer answers them,
at most max_entries rows, drops counted, no Python object kept per entry."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from mallory.timeline import rows as rows_module
from mallory.timeline.abstraction import ABSTRACTIONS, behaviour
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from mallory.timeline.rows import EntryRows
from mallory.timeline.synthetic import synthetic_stream
from mallory.timeline.window import EntryBuffer, summarize

WINDOW_NS = 100_000_000
NODES = [f"n{i + 1}" for i in range(3)]


def committed_batches(n_events: int, packet_share: float = 0.3) -> list[list[Committed]]:
    """A synthetic 3-node stream through the builder: the entries each record committed, in
    the batches a mediator's ingest hands them on."""
    builder = TimelineBuilder(nodes=NODES)
    out = []
    for record in synthetic_stream(n_events, n_nodes=3, packet_share=packet_share, events_per_s=20_000, seed=7):
        if isinstance(record, ClockPair):
            builder.add_clock(record)
        else:
            assert isinstance(record, Batch)
            builder.add_batch(record)
        drained = builder.drain()
        if drained:
            out.append(drained)
    return out


def answer(entries: list[Committed]) -> tuple:
    """Everything a window answer is made of, under every abstraction."""
    seen = behaviour(entries)
    return (len(entries), seen.types, seen.pairs, *(summarize(entries, name) for name in sorted(ABSTRACTIONS)))


def read(entries: list[Committed]) -> list[tuple]:
    """What the readers of a window's entries read of each (rows.py's module docstring): its
    event but for ts, its real time, and which entry of the same list its SEND is."""
    at = {id(e): i for i, e in enumerate(entries)}
    return [(e.event.node, e.event.kind, e.event.id, e.event.data, e.real_ns,
             None if e.send is None else at.get(id(e.send), "outside")) for e in entries]


def test_windows_are_answered_as_the_object_buffer_answers_them():
    batches = committed_batches(20_000)
    flat = [e for batch in batches for e in batch]
    assert sum(e.send is not None for e in flat) > 1000, "the stream must link messages"
    objects, rows = EntryBuffer(), EntryRows()
    for batch in batches:
        objects.add(batch)
        rows.add(batch)
    assert len(rows) == len(objects) == len(flat) and rows.earliest() == objects.earliest()
    t0 = min(e.real_ns for e in flat)
    assert answer(rows.peek(t0, t0 + WINDOW_NS)) == answer(objects.peek(t0, t0 + WINDOW_NS))
    windows = 0
    while len(objects):
        expected = objects.take(t0, t0 + WINDOW_NS)
        got = rows.take(t0, t0 + WINDOW_NS)
        assert answer(got) == answer(expected)
        assert read(got) == [  # the buffer links a RECV only to a SEND it also returns
            (*r[:5], None if r[5] == "outside" else r[5]) for r in read(expected)]
        assert len(rows) == len(objects) and rows.late == objects.late
        t0 += WINDOW_NS
        windows += 1
    assert windows > 5 and rows.dropped == 0 and not rows.truncated(0)


def test_rebuilt_recvs_point_at_their_send_only_inside_the_take():
    send = Committed(Event("a", Kind.SEND, 10, 99, "beef"), 10, 1, 0, None)
    recv = Committed(Event("b", Kind.RECV, 30, 99, "beef"), 30, 2, 0, send)
    dup = Committed(Event("b", Kind.RECV, 40, 99, "beef"), 40, 3, 1, send)
    rows = EntryRows()
    rows.add([send, recv, dup])
    got_send, got_recv, got_dup = rows.peek(0, 100)
    assert got_recv.send is got_send and got_dup.send is got_send
    (alone,) = rows.peek(20, 35)
    assert alone.event[:2] == recv.event[:2] and alone.send is None, "its SEND is outside this window"


def test_a_rebuilt_recv_is_linked_to_its_own_send_not_another_with_its_packet_id():
    """c's SEND of the same packet id commits first but is stamped later (c's clock runs
    ahead): inside [20, 35) it is the only SEND with that id, and still not the RECV's."""
    other = Committed(Event("c", Kind.SEND, 25, 99, "beef"), 25, 1, 0, None)
    send = Committed(Event("a", Kind.SEND, 10, 99, "beef"), 10, 1, 0, None)
    recv = Committed(Event("b", Kind.RECV, 30, 99, "beef"), 30, 2, 0, send)
    rows = EntryRows()
    rows.add([other, send, recv])
    got_other, got_recv = rows.peek(20, 35)
    assert got_other.event.node == "c" and got_recv.send is None


def test_rebuilt_entries_carry_no_made_up_clock_or_lamport_values():
    """ts, lamport and a non-SEND's index are not kept (no window reads them): a rebuilt
    entry says so (0, 0, -1) rather than carrying values that look real."""
    send = Committed(Event("a", Kind.SEND, 123, 7, "x"), 10, 5, 3, None)
    recv = Committed(Event("b", Kind.RECV, 456, 7, "x"), 20, 6, 9, send)
    rows = EntryRows()
    rows.add([send, recv])
    got_send, got_recv = rows.peek(0, 100)
    assert (got_send.event.ts, got_send.lamport, got_send.index) == (0, 0, 3), "a SEND keeps its index: its key"
    assert (got_recv.event.ts, got_recv.lamport, got_recv.index) == (0, 0, -1)
    assert got_recv.send is got_send and got_send.recvs == []
    assert (got_recv.event.node, got_recv.event.id, got_recv.event.data, got_recv.real_ns) == ("b", 7, "x", 20)


def test_beyond_max_entries_the_oldest_are_dropped_counted_and_windows_before_them_truncated():
    batches = committed_batches(12_000)
    flat = [e for batch in batches for e in batch]
    bound = 3_000
    rows, objects = EntryRows(max_entries=bound), EntryBuffer()
    for batch in batches:
        rows.add(batch)
        objects.add(batch)
        assert len(rows) <= bound and rows.capacity <= bound + bound // 4
    assert len(rows) == bound and rows.dropped == len(flat) - bound
    kept = flat[-bound:]
    # rows moved down in place (a full buffer) or reallocated: the newest, in commit order
    assert read(rows.peek(0, 2**63 - 1)) == [(*r[:5], None if r[5] == "outside" else r[5]) for r in read(kept)]
    assert rows.dropped_until_ns == max(e.real_ns for e in flat[:-bound]) + 1
    assert rows.truncated(flat[0].real_ns) and not rows.truncated(rows.dropped_until_ns)
    # a window inside what is kept is the window the unbounded buffer gives
    t0 = rows.dropped_until_ns
    t1 = t0 + (kept[-1].real_ns - t0) // 2
    assert answer(rows.take(t0, t1)) == answer(objects.take(t0, t1))


def test_a_batch_larger_than_the_bound_keeps_its_newest_entries():
    entries = [Committed(Event("a", Kind.FUNC, t, t), t, t + 1, t, None) for t in range(10)]
    rows = EntryRows(max_entries=4)
    rows.add(entries[:2])
    rows.add(entries[2:])
    assert [e.event.id for e in rows.peek(0, 100)] == [6, 7, 8, 9]
    assert rows.dropped == 6 and rows.dropped_until_ns == 6


def test_release_before_counts_what_it_drops_and_capacity_follows_the_live_rows_down():
    entries = [Committed(Event("a", Kind.FUNC, t, 1), t, t + 1, t, None) for t in range(100_000)]
    rows = EntryRows()
    rows.add(entries)
    assert rows.capacity >= 100_000
    rows.release_before(50, slack=100)  # the oldest (0) is not yet 100 older than 50
    assert len(rows) == 100_000 and rows.dropped == 0
    rows.release_before(99_000)
    assert len(rows) == 1_000 and rows.dropped == 99_000 and rows.dropped_until_ns == 98_999 + 1
    assert rows.capacity < 10_000, "a buffer emptied by a release gives its rows back"
    rows.take(99_000, 99_500)
    assert len(rows) == 500 and rows.dropped == 99_000, "what a window takes is not dropped"
    empty = EntryRows()
    assert empty.take(0, 10) == [] and empty.capacity == 0, "a window over nothing allocates nothing"


def test_equal_data_strings_are_shared_and_the_table_cannot_grow_without_bound(monkeypatch):
    monkeypatch.setattr(rows_module, "MAX_STRINGS", 4)
    rows = EntryRows()
    # "".join builds a new string object each time: as decoding a batch does
    rows.add([Committed(Event("a", Kind.SEND, t, t, "".join(["ab", "cd"])), t, 1, t, None) for t in range(3)])
    first, second, third = rows.peek(0, 10)
    assert first.event.data == "abcd" and first.event.data is second.event.data is third.event.data
    rows.add([Committed(Event("a", Kind.SEND, t, t, f"{t:08x}"), t, 1, t, None) for t in range(3, 20)])
    assert len(rows._strings) <= 4


def test_rows_hold_no_committed_entries_and_a_fraction_of_their_memory():
    """What the soak's census found alive per buffered entry (a Committed, its Event and
    their ints and strings) is gone: the rows hold plain bytes."""
    entries = [e for batch in committed_batches(30_000) for e in batch]
    n = len(entries)

    def alive() -> int:
        return sum(type(o) is Committed for o in gc.get_objects())

    def kept(make, add) -> tuple[int, int, object]:
        """Bytes and Committed objects the buffer keeps of fresh copies of the entries."""
        gc.collect()
        before_objects = alive()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            copies = [Committed(Event(e.event.node, e.event.kind, e.event.ts, e.event.id, "".join(e.event.data)),
                                e.real_ns, e.lamport, e.index, None) for e in entries]  # fresh objects, as decoded
            buffer = make()
            add(buffer, copies)
            del copies  # the caller's references go: what stays is what the buffer keeps
            gc.collect()
            traced = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        return traced, alive() - before_objects, buffer

    object_bytes, object_entries, objects = kept(EntryBuffer, EntryBuffer.add)
    row_bytes, row_entries, rows = kept(EntryRows, EntryRows.add)
    assert len(objects) == len(rows) == n
    assert object_entries == n and row_entries == 0, "rows keep no Committed entries"
    # rows are allocated ahead (up to 1.5 times the live ones): bytes per allocated row
    assert object_bytes / n > 150 and row_bytes / rows.capacity < rows_module.ROW.itemsize + 16, (
        object_bytes / n, row_bytes / rows.capacity)
    assert object_bytes / row_bytes > 2


def test_max_entries_must_be_positive():
    with pytest.raises(ValueError):
        EntryRows(max_entries=0)


@pytest.mark.parametrize("buffer_class", [EntryBuffer, EntryRows])
def test_entries_between_windows_are_unwindowed_and_only_those_a_taken_window_covered_are_late(buffer_class):
    """The campaign's windows leave gaps (between steps, between schedules): an entry in a gap
    is `unwindowed`; `late` counts only entries that came after a window ending past them."""
    def entry(t: int) -> Committed:
        return Committed(Event("a", Kind.FUNC, t, t, ""), t, t, t, None)

    buffer = buffer_class()
    buffer.add([entry(t) for t in range(1, 11)])
    assert len(buffer.take(3, 5)) == 2  # 1 and 2 are before the first window
    assert (buffer.late, buffer.unwindowed) == (0, 2)
    buffer.add([entry(4), entry(6)])  # 4 came after [3, 5) was taken; 6 is in the gap [5, 8)
    assert [e.real_ns for e in buffer.take(8, 9)] == [8]
    assert (buffer.late, buffer.unwindowed) == (1, 6)  # 5, 6, 7 and the added 6 fell in the gap
    buffer.add([entry(7)])  # after [8, 9): late, though it is also in a gap
    buffer.take(9, 10)
    assert (buffer.late, buffer.unwindowed) == (2, 6)
