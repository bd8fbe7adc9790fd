"""Observer batching logic with named fakes for its sources and its sender (no root)."""

from __future__ import annotations

import time

from mallory.observer.nfq import NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT
from mallory.observer.observer import RING_MARGIN_NS, Observer, clock_pair
from mallory.observer.packet import id_and_data
from mallory.timeline.event import Event, Kind

from .netlink_messages import tcp_packet


class FakeSender:
    def __init__(self) -> None:
        self.batches: list[tuple[list[Event], int, int]] = []

    def submit(self, events, until_ns, lost=0) -> None:
        self.batches.append((events, until_ns, lost))


class FakeCapture:
    """Stands in for NfQueue: `lost` as the kernel's id gaps would set it."""

    def __init__(self) -> None:
        self.lost = 0


class FakeRing:
    def __init__(self) -> None:
        self.pending: list[Event] = []
        self.lost_total = 0

    def poll_events(self) -> list[Event]:
        out, self.pending = self.pending, []
        return out


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


def test_lost_is_reported_as_a_delta_per_batch():
    sender, capture, ring = FakeSender(), FakeCapture(), FakeRing()
    obs = Observer("n1", capture, sender, ring=ring, ring_lost=lambda: ring.lost_total)
    capture.lost, ring.lost_total = 3, 2
    obs.cut()
    obs.cut()
    capture.lost = 4
    obs.cut()
    assert [lost for _, _, lost in sender.batches] == [5, 0, 1]


def test_ring_events_merge_in_time_order_and_until_keeps_a_margin():
    sender, ring = FakeSender(), FakeRing()
    obs = Observer("n1", FakeCapture(), sender, ring=ring, ring_lost=lambda: 0)
    now = time.monotonic_ns()
    obs.on_packets([(1, NF_INET_LOCAL_OUT, now + 5, tcp_packet(b"a"))])
    ring.pending = [Event("n1", Kind.FUNC, now + 9, 77), Event("n1", Kind.BLOCK, now + 1, 78)]
    before = time.monotonic_ns()
    obs.cut()
    [(events, until, _)] = sender.batches
    assert [e.ts for e in events] == [now + 1, now + 5, now + 9]
    assert before - RING_MARGIN_NS <= until <= time.monotonic_ns() - RING_MARGIN_NS


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
