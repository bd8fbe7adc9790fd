"""Observer batching logic with named fakes for its packet source and its sender, and a real
shm ring written by a fake writer (no root)."""

from __future__ import annotations

import threading
import time

import pytest

from mallory.observer.nfq import NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT
from mallory.observer.observer import Observer, clock_pair, limit_until
from mallory.observer.packet import id_and_data
from mallory.observer.ring import RingBacklog, RingReader, create_ring
from mallory.timeline.event import Event, Kind

from .netlink_messages import tcp_packet
from .ring_writer import FakeWriter


class FakeSender:
    def __init__(self) -> None:
        self.batches: list[tuple[list[Event], int, int]] = []
        self.times: list[float] = []  # time.monotonic() of each submit

    def submit(self, events, until_ns, lost=0) -> None:
        self.batches.append((events, until_ns, lost))
        self.times.append(time.monotonic())


class FakeCapture:
    """Stands in for NfQueue: `lost` as the kernel's id gaps would set it."""

    def __init__(self) -> None:
        self.lost = 0


@pytest.fixture
def ring_of_n1(shm_name):
    """(writer, backlog) of a fresh 64-slot ring read as node n1's."""
    create_ring(shm_name, 64)
    writer = FakeWriter(shm_name)
    reader = RingReader(shm_name, node="n1")
    yield writer, RingBacklog(reader)
    reader.close()
    writer.close()


def assert_sound(batches) -> None:
    """What the timeline builder relies on: each batch's events in ts order and older than
    its until_ns, and no event older than an until_ns already sent."""
    promised = 0
    for events, until, _ in batches:
        stamps = [e.ts for e in events]
        assert stamps == sorted(stamps)
        assert all(promised <= ts < until for ts in stamps), (promised, stamps, until)
        assert until >= promised
        promised = until


def test_packets_become_send_and_recv_events_with_the_packet_id():
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender)
    out_pkt, in_pkt = tcp_packet(b"ping", seq=1), tcp_packet(b"pong", seq=2)
    obs.on_packets([(1, NF_INET_LOCAL_OUT, 10, out_pkt), (2, NF_INET_LOCAL_IN, 20, in_pkt), (3, NF_INET_LOCAL_IN, 30, b"junk")])
    obs.cut()
    [(events, until, lost)] = sender.batches
    assert events == [
        Event("n1", Kind.SEND, 10, *id_and_data(out_pkt)),
        Event("n1", Kind.RECV, 20, *id_and_data(in_pkt)),
    ]
    assert events[0].data == b"ping".hex() and obs.packets == 2 and lost == 0
    assert until >= 20


def test_lost_is_reported_as_a_delta_per_batch(ring_of_n1):
    _, backlog = ring_of_n1
    sender, capture = FakeSender(), FakeCapture()
    ring_lost = [2]
    obs = Observer("n1", capture, sender, ring=backlog, ring_lost=lambda: ring_lost[0])
    capture.lost = 3
    obs.cut()
    obs.cut()
    capture.lost = 4
    obs.cut()
    assert [lost for _, _, lost in sender.batches] == [5, 0, 1]


def test_ring_events_merge_in_time_order_and_until_is_the_rings_bound(ring_of_n1):
    writer, backlog = ring_of_n1
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender, ring=backlog, ring_lost=lambda: 0)
    now = time.monotonic_ns()
    obs.on_packets([(1, NF_INET_LOCAL_OUT, now + 5, tcp_packet(b"a"))])
    writer.event(now + 9, 77, Kind.FUNC)
    writer.event(now + 1, 78, Kind.BLOCK)
    before = time.monotonic_ns()
    obs.cut()
    [(events, until, _)] = sender.batches
    assert [(e.ts, e.kind) for e in events] == [(now + 1, Kind.BLOCK), (now + 5, Kind.SEND), (now + 9, Kind.FUNC)]
    assert before <= until <= backlog.complete_until_ns


def test_events_the_ring_may_still_precede_wait_for_a_later_batch(ring_of_n1):
    """A slot claimed but not yet written stops the ring's read: its event may be older than
    anything read after the previous cut, so the batch promises no more than that cut did,
    and the packet read meanwhile waits too."""
    writer, backlog = ring_of_n1
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender, ring=backlog, ring_lost=lambda: 0)
    writer.event(time.monotonic_ns(), 1)
    obs.cut()
    bound = backlog.complete_until_ns  # the ring's events not read yet are not older
    pos = writer.claim()  # a writer preempted between claiming its slot and writing it
    writer.event(bound + 20, 3)
    obs.on_packets([(1, NF_INET_LOCAL_OUT, bound + 30, tcp_packet(b"a"))])
    assert obs.cut() is False  # not behind: waiting for a writer is no reason to cut at once
    events, until, _ = sender.batches[1]
    assert events == [] and until == bound
    writer.write_slot(pos, bound + 10, 2, 1)
    obs.cut()
    assert [e.ts - bound for e in sender.batches[2][0]] == [10, 20, 30]
    assert_sound(sender.batches)


def test_a_burst_goes_in_batches_of_at_most_the_limit_each_complete_only_up_to_what_it_holds(ring_of_n1):
    writer, backlog = ring_of_n1
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender, ring=backlog, ring_lost=lambda: 0, max_events=4)
    t0 = time.monotonic_ns()
    stamps = [t0 + 10 * i for i in range(11)]
    for i, ts in enumerate(stamps):
        if i % 5 == 4:  # packets among the ring's events
            obs.on_packets([(i, NF_INET_LOCAL_IN, ts, tcp_packet(b"p", seq=i))])
        else:
            writer.event(ts, i)
    behind = [obs.cut() for _ in range(6)]
    # three reads of 4, 4 and 1 ring events before the ring can promise anything (its
    # events were written before its reader's first look), then two full batches
    assert behind == [True, True, True, True, False, False]
    assert all(len(events) <= 4 for events, _, _ in sender.batches)
    assert [e.ts for events, _, _ in sender.batches for e in events] == stamps
    assert_sound(sender.batches)
    # until_ns of a batch the limit cut short is the first event left out
    assert [until for events, until, _ in sender.batches if len(events) == 4] == [stamps[4], stamps[8]]


def test_packets_beyond_the_limit_wait_and_the_next_cut_takes_them():
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender, max_events=3)
    obs.on_packets([(i, NF_INET_LOCAL_OUT, 100 + i, tcp_packet(b"x", seq=i)) for i in range(7)])
    assert [obs.cut(), obs.cut(), obs.cut()] == [True, True, False]
    assert [[e.ts for e in events] for events, _, _ in sender.batches] == [[100, 101, 102], [103, 104, 105], [106]]
    assert [until for _, until, _ in sender.batches][:2] == [103, 106]
    assert_sound(sender.batches)


class FakeLogs:
    """Stands in for a LogWatcher: hands out `pending` once, counts checkpoints."""

    def __init__(self) -> None:
        self.pending: list[Event] = []
        self.checkpoints = 0

    def poll_events(self) -> list[Event]:
        out, self.pending = self.pending, []
        return out

    def checkpoint(self) -> None:
        self.checkpoints += 1


def test_the_log_cursor_is_saved_only_once_no_log_event_read_waits():
    sender, logs = FakeSender(), FakeLogs()
    obs = Observer("n1", FakeCapture(), sender, logs=logs, max_events=2)
    t0 = time.monotonic_ns()
    logs.pending = [Event("n1", Kind.LOG, t0 + i, i, "line") for i in range(3)]
    assert obs.cut() is True and logs.checkpoints == 0  # the third waits
    assert obs.cut() is False and logs.checkpoints == 1
    assert [e.id for events, _, _ in sender.batches for e in events] == [0, 1, 2]


def test_limit_until_leaves_out_the_first_stamp_beyond_the_limit_but_never_takes_nothing():
    assert limit_until([13, 11, 12, 14], 2) == 13
    assert limit_until([11, 12, 12, 14], 2) == 12  # both events at 12 wait: one batch of 1
    assert limit_until([12, 12, 12, 14], 2) == 13  # all at 12 go: more than the limit, not none


def test_the_loop_cuts_again_at_once_while_the_ring_has_more(ring_of_n1):
    writer, backlog = ring_of_n1
    sender = FakeSender()
    obs = Observer("n1", None, sender, ring=backlog, ring_lost=lambda: 0, interval=1.0, max_events=4)
    t0 = time.monotonic_ns()
    for i in range(20):
        writer.event(t0 + i, i)
    stop = threading.Event()
    loop = threading.Thread(target=obs.run, args=(stop,))
    loop.start()
    try:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and sum(len(e) for e, _, _ in sender.batches) < 20:
            time.sleep(0.005)
    finally:
        stop.set()
        loop.join(5.0)
    assert sum(len(e) for e, _, _ in sender.batches) == 20
    assert len(sender.batches) >= 5  # at most 4 events each
    assert sender.times[-1] - sender.times[0] < 0.5  # one burst of cuts, not one per interval
    assert_sound(sender.batches)


def test_finish_sends_the_backlog_and_counts_what_it_could_not_promise_lost(ring_of_n1):
    writer, backlog = ring_of_n1
    sender = FakeSender()
    obs = Observer("n1", None, sender, ring=backlog, ring_lost=lambda: 0, max_events=4)
    t0 = time.monotonic_ns()
    for i in range(10):
        writer.event(t0 + i, i)
    writer.event(t0 + 60 * 10**9, 99)  # stamped a minute ahead: no cut can promise past it
    obs.finish()
    assert [e.id for events, _, _ in sender.batches for e in events] == list(range(10))
    assert sender.batches[-1][2] == 1 and len(backlog) == 0
    assert_sound(sender.batches)


def test_clock_pair_reads_both_clocks_together():
    pair = clock_pair("n3")
    assert pair.node == "n3"
    assert abs(pair.to_real(time.monotonic_ns()) - time.time_ns()) < 5_000_000


def test_segments_that_continue_a_write_share_one_payload_type():
    """A write of three segments (PSH on the last) then a one-segment write: only the
    segments that start a write keep their first bytes; each direction is its own flow."""
    from mallory.observer.packet import CONTINUATION
    from tests.unit.mediator.packets import tcp

    ack, push = 0x10, 0x18
    a_to_b = [
        tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 1, b"$523\r\nrole", flags=ack),
        tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 11, b"tatus:ok", flags=ack),
        tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 19, b"essed\r\n", flags=push),
        tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 26, b"+PONG\r\n", flags=push),
    ]
    b_to_a = tcp("10.1.2.2", "10.1.1.2", 9000, 5000, 7, b"*1\r\n", flags=push)
    pure_ack = tcp("10.1.2.2", "10.1.1.2", 9000, 5000, 11, b"", flags=ack)
    sender = FakeSender()
    obs = Observer("n1", FakeCapture(), sender)
    packets = [a_to_b[0], b_to_a, a_to_b[1], pure_ack, a_to_b[2], a_to_b[3]]
    obs.on_packets([(i, NF_INET_LOCAL_OUT, 10 + i, p) for i, p in enumerate(packets)])
    obs.cut()
    [(events, _, _)] = sender.batches
    assert [e.data for e in events] == [b"$523".hex(), b"*1\r\n".hex(), CONTINUATION, "", CONTINUATION, b"+PON".hex()]
    assert [e.id for e in events] == [id_and_data(p)[0] for p in packets]


def test_write_starts_reads_ports_past_ip_options_and_forgets_flows_when_full():
    """The flow key and the flags come from after the IP options; a full table is emptied,
    so a flow it forgot mid-write starts again (never the other way round); UDP payloads
    always keep their first bytes."""
    from mallory.observer.packet import CONTINUATION, WriteStarts
    from tests.unit.mediator.packets import tcp, udp

    ack, push = 0x10, 0x18
    options = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL: a 24-byte IP header

    def data(starts: WriteStarts, packet: bytes) -> str:
        return starts.data(packet, id_and_data(packet)[1])

    starts = WriteStarts(limit=2)
    a1 = tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 1, b"abcdef", flags=ack, ip_options=options)
    a2 = tcp("10.1.1.2", "10.1.2.2", 5000, 9000, 7, b"ghijkl", flags=ack, ip_options=options)
    other_port = tcp("10.1.1.2", "10.1.2.2", 5001, 9000, 1, b"mnopqr", flags=ack, ip_options=options)
    assert (data(starts, a1), data(starts, other_port), data(starts, a2)) == (b"abcd".hex(), b"mnop".hex(), CONTINUATION)
    third = tcp("10.1.1.3", "10.1.2.2", 5000, 9000, 1, b"stuvwx", flags=push)
    assert data(starts, third) == b"stuv".hex()  # a third flow: the table was full and is emptied
    assert data(starts, a2) == b"ghij".hex()  # forgotten mid-write: a start again
    assert data(starts, a2) == CONTINUATION
    datagram = udp("10.1.1.2", "10.1.2.2", 5000, 9000, b"0123456")
    assert data(starts, datagram) == data(starts, datagram) == b"0123".hex()
