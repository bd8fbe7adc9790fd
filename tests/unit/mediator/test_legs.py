"""The join across the message layer (mallory/mediator/legs.py): an outgoing packet is
relinked to the incoming segment its first byte was read from, whatever the layer did to
the messages between; the capture drops what the firewall's link rules drop; the ingest
gives RECVs the relinked ids."""

from __future__ import annotations

from mallory.mediator import legs
from mallory.mediator.firewall import SeenPackets
from mallory.mediator.ingest import NO_SEND, Ingest
from mallory.mediator.legs import ACCEPT, DROP, LegCapture, LegJoin, tcp_fields
from mallory.mediator.rules import LinkRule
from mallory.observer.nfq import NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT
from mallory.observer.packet import id_of, ip_int
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from tests.unit.mediator.packets import tcp

KEY = (ip_int("10.9.1.2"), 40000, ip_int("10.9.2.2"), 7001)
SYN, ACK = 0x02, 0x10
IN_ISN, OUT_ISN = 0xFFFFFF00, 5000  # the incoming leg's sequence numbers wrap


def started() -> LegJoin:
    join = LegJoin()
    join.packet(True, KEY, IN_ISN, SYN, 0, 1)
    join.packet(False, KEY, OUT_ISN, SYN, 0, 2)
    return join


def incoming(join: LegJoin, offset: int, length: int, packet_id: int) -> None:
    join.packet(True, KEY, (IN_ISN + 1 + offset) & 0xFFFFFFFF, ACK, length, packet_id)


def outgoing(join: LegJoin, offset: int, length: int, packet_id: int) -> None:
    join.packet(False, KEY, OUT_ISN + 1 + offset, ACK, length, packet_id)


def test_outgoing_packets_join_the_incoming_segments_their_bytes_came_from():
    join = started()
    incoming(join, 0, 300, 100)  # messages A (0..100) B (100..250) C (250..300)
    incoming(join, 300, 200, 101)  # D (300..500)
    # the layer dropped B, wrote A, then D, then C (reordered)
    for out, at, length in ((0, 0, 100), (100, 300, 200), (300, 250, 50)):
        join.written(KEY, out, at, length)
    outgoing(join, 0, 150, 200)  # A and the start of D
    outgoing(join, 150, 150, 201)  # the rest of D
    outgoing(join, 300, 50, 202)  # C
    assert [join.relink(i) for i in (200, 201, 202)] == [100, 101, 100]
    assert join.relink(100) is None and join.stats()["relinked"] == 3


def test_bytes_the_layer_never_wrote_and_legs_without_a_syn_stay_unjoined():
    join = started()
    incoming(join, 0, 100, 100)
    join.written(KEY, 0, 0, 100)
    outgoing(join, 100, 10, 300)  # beyond every span written
    assert join.relink(300) is None and join.unjoined == 1
    other = LegJoin()
    other.packet(False, KEY, 7, ACK, 10, 400)
    assert other.relink(400) is None and other.unjoined == 1


def test_a_new_syn_on_the_same_four_tuple_starts_afresh():
    join = started()
    incoming(join, 0, 100, 100)
    join.written(KEY, 0, 0, 100)
    join.packet(True, KEY, 10, SYN, 0, 9)  # the connection was opened again
    join.packet(True, KEY, 11, ACK, 100, 110)
    outgoing(join, 0, 100, 500)
    assert join.relink(500) == 110


def test_the_gateways_own_packets_are_known_as_sent_by_no_node():
    join = started()  # its outgoing SYN (id 2) is the gateway's
    incoming(join, 0, 100, 100)
    join.written(KEY, 0, 0, 100)
    join.packet(False, KEY, OUT_ISN + 1, ACK, 0, 300)  # a pure ACK
    join.packet(True, KEY, IN_ISN + 101, ACK, 0, 301)  # the sender's ACK: not the gateway's
    outgoing(join, 0, 100, 302)
    assert [join.relink(i) for i in (2, 300, 301, 302)] == [NO_SEND, NO_SEND, None, 100]


def test_retransmitted_and_overtaken_segments_keep_the_joins_exact():
    """The gateway's ACKs lost (a one-way partition): the sender retransmits segments the
    gateway already read, after later ones; a retransmission keeps the first copy's id."""
    join = started()
    incoming(join, 0, 100, 100)
    incoming(join, 200, 100, 102)  # overtook 100..200
    incoming(join, 100, 100, 101)
    incoming(join, 0, 100, 150)  # retransmissions
    incoming(join, 100, 100, 151)
    incoming(join, 300, 100, 103)
    join.written(KEY, 0, 0, 400)
    for n, packet_id in enumerate((200, 201, 202, 203)):
        outgoing(join, 100 * n + 10, 10, packet_id)
    assert [join.relink(i) for i in (200, 201, 202, 203)] == [100, 101, 102, 103]


def test_joins_stay_exact_past_four_gibibytes():
    join = started()
    for k in range(21):  # a stream 20 GiB long, a segment every GiB, on both legs
        at = k << 30
        incoming(join, at, 100, 1000 + k)  # incoming() wraps the offset into a sequence number
        join.written(KEY, at + 7, at, 100)
    join.packet(False, KEY, (OUT_ISN + 1 + (20 << 30) + 57) & 0xFFFFFFFF, ACK, 100, 200)
    join.packet(False, KEY, (OUT_ISN + 1 + (19 << 30) + 7) & 0xFFFFFFFF, ACK, 100, 201)  # a retransmission
    assert join.relink(200) == 1020 and join.relink(201) == 1019


def test_a_connection_in_use_outlives_the_churn_of_others():
    join = started()
    incoming(join, 0, 100, 100)
    join.written(KEY, 0, 0, 100)
    for n in range(legs.MAX_DIRECTIONS + 10):
        other = (KEY[0], 1000 + n, KEY[2], KEY[3])
        join.packet(True, other, 1, SYN, 0, 7)
        if n % 100 == 0:
            incoming(join, 100, 10, 101)  # KEY stays in use meanwhile
    outgoing(join, 0, 10, 200)
    assert join.relink(200) == 100


def test_the_capture_joins_both_legs_and_drops_what_a_partition_drops():
    join, seen = LegJoin(), SeenPackets()
    rules = {("n2", "n1"): LinkRule(drop=True)}
    capture = LegCapture(join, {"n1": "10.9.1.2", "n2": "10.9.2.2"}, lambda: rules, seen)
    syn_in = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 999, flags=SYN)
    data_in = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 1000, b"A 1\n", ident=1)
    syn_out = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 4999, flags=SYN)
    data_out = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 5000, b"A 1\n", ident=2)
    back = tcp("10.9.2.2", "10.9.1.2", 7001, 40000, 1, b"a\n")
    join.written(KEY, 0, 0, 4)
    packets = list(enumerate([syn_in, data_in, syn_out, data_out, back], 1))
    hooks = [NF_INET_LOCAL_IN, NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT, NF_INET_LOCAL_OUT, NF_INET_LOCAL_IN]
    assert capture.verdicts(packets, hooks) == [(1, ACCEPT), (2, ACCEPT), (3, ACCEPT), (4, ACCEPT), (5, DROP)]
    assert join.relink(id_of(data_out)) == id_of(data_in)
    assert id_of(data_in) in seen and id_of(data_out) in seen and capture.counts["dropped"] == 1


def test_a_delayed_link_holds_its_packets_on_their_incoming_leg_in_order():
    """The firewall's delay rule on n1->n2 holds what n1 sends into the gateway (data and
    ACKs), not the gateway's own packets on leg 2 (they would be delayed twice)."""
    rules = {("n1", "n2"): LinkRule(delay_ns=50_000_000)}
    capture = LegCapture(LegJoin(), {"n1": "10.9.1.2", "n2": "10.9.2.2"}, lambda: rules, SeenPackets())
    data_in = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 1000, b"A 1\n", ident=1)
    data_out = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 5000, b"A 1\n", ident=2)
    back = tcp("10.9.2.2", "10.9.1.2", 7001, 40000, 1, b"a\n")
    verdicts = capture.verdicts([(1, data_in), (2, data_out), (3, back)],
                                [NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT, NF_INET_LOCAL_IN])
    assert verdicts == [(1, 50_000_000), (2, ACCEPT), (3, ACCEPT)] and capture.counts["delayed"] == 1
    capture.hold(1, 50, now=1000)
    capture.hold(4, 50, now=1001)
    assert capture.due(1049) == ([], 1050)
    assert capture.due(2000) == ([1, 4], None)


def test_tcp_fields():
    pkt = tcp("10.9.1.2", "10.9.2.2", 40000, 7001, 77, b"hello", flags=0x18)
    assert tcp_fields(pkt) == (KEY, 77, 0x18, 5)
    assert tcp_fields(b"\x45" + b"\x00" * 10) is None


def test_the_ingest_gives_a_relinked_recv_the_senders_id():
    builder = TimelineBuilder(skew_ns=0, nodes=["n1", "n2"])
    ingest = Ingest(builder)
    ingest.relink = {22: 11, 44: NO_SEND}.get
    committed = []
    ingest.subscribers.append(committed.extend)
    for node in ("n1", "n2"):
        ingest.on_clock(ClockPair(node, 0, 0))
    ingest.on_batch(Batch("n1", 0, 100, [Event("n1", Kind.SEND, 10, 11, "append")]))
    ingest.on_batch(Batch("n2", 0, 100, [Event("n2", Kind.RECV, 20, 22, "append"), Event("n2", Kind.RECV, 30, 33),
                                         Event("n2", Kind.RECV, 40, 44)]))
    recvs = [c for c in committed if c.event.kind is Kind.RECV]
    assert [(c.event.id, c.send is not None) for c in recvs] == [(11, True), (33, False)]
    assert ingest.stats()["recvs_left_out"] == 1  # the gateway's own packet: no RECV
