"""The message layer's relay (mallory/mediator/proxy.py, `Relay`) with fake sockets: whole
messages decided one by one (deliver, drop, hold and release, delay, duplicate), partial
writes, unframed bytes, the end of a stream, and the spans it reports for the join."""

from __future__ import annotations

import socket
import struct

from mallory.mediator.proxy import Delivery, Outcome, Relay
from mallory.observer.framing import stream_factory
from mallory.observer.messages import parse_messages

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2"}
LINES = parse_messages({"delimiter": "\n", "type": {"names": {"65": "append", "86": "vote"}}}, "t")
SENDER, RECEIVER = ("10.9.1.2", 40000), ("10.9.2.2", 7001)


class FakeSocket:
    """A fake non-blocking socket: takes at most `room` bytes a send (None: all)."""

    def __init__(self, room: int | None = None) -> None:
        self.room = room
        self.sent = b""
        self.shut = False
        self.closed = False
        self.aborted = False  # closed with SO_LINGER 0 (a RST)

    def send(self, data: bytes) -> int:
        if self.room == 0:
            raise BlockingIOError
        n = len(data) if self.room is None else min(self.room, len(data))
        self.sent += bytes(data[:n])
        return n

    def shutdown(self, how: int) -> None:
        self.shut = True

    def setsockopt(self, level: int, option: int, value: bytes) -> None:
        if option == socket.SO_LINGER:
            self.aborted = struct.unpack("ii", value) == (1, 0)

    def close(self) -> None:
        self.closed = True


class FakeDecider:
    """A fake decider: answers each arriving message with `rule(message)` (default: deliver)
    and records what it heard."""

    def __init__(self, rule=None) -> None:
        self.rule = rule or (lambda m: Outcome((Delivery(m.id),)))
        self.arrived, self.delivered, self.lost = [], [], []

    def on_message(self, message):
        self.arrived.append(message)
        return self.rule(message)

    def on_delivered(self, message):
        self.delivered.append(message)
        return Outcome(forget=(message.id,))

    def on_lost(self, message_id):
        self.lost.append(message_id)


def relay(decider, room=None, **options):
    spans = []
    r = Relay(NODES, stream_factory(LINES), decider, on_written=lambda *span: spans.append(span), **options)
    one, two = FakeSocket(), FakeSocket(room)
    conn = r.open(one, two, SENDER, RECEIVER, connected=True)
    return r, conn, one, two, spans


def test_each_whole_message_is_decided_and_delivered_and_its_receipt_heard():
    decider = FakeDecider()
    r, conn, one, two, spans = relay(decider)
    there = conn.directions[0]
    r.received(there, b"A 1\nV 2")
    r.received(there, b"\n")
    assert [(m.id, m.src, m.dst, m.type, m.payload) for m in decider.arrived] == [
        ("m1", "n1", "n2", "append", b"A 1\n"), ("m2", "n1", "n2", "vote", b"V 2\n")]
    assert two.sent == b"A 1\nV 2\n" and [m.id for m in decider.delivered] == ["m1", "m2"]
    assert r.pending == {}  # forgotten once delivered
    assert spans == [((0xA090102, 40000, 0xA090202, 7001), 0, 0, 4), ((0xA090102, 40000, 0xA090202, 7001), 4, 4, 4)]


def test_a_dropped_message_never_reaches_the_receiver_and_later_ones_do():
    decider = FakeDecider(lambda m: Outcome((), (m.id,)) if m.type == "vote" else Outcome((Delivery(m.id),)))
    r, conn, one, two, spans = relay(decider)
    r.received(conn.directions[0], b"V 1\nA 2\n")
    assert two.sent == b"A 2\n" and r.pending == {}
    assert spans[0][1:] == (0, 4, 4)  # A 2 was read at offset 4, written at 0


def test_a_held_message_released_later_is_reordered():
    decider = FakeDecider(lambda m: Outcome() if m.type == "vote" else Outcome((Delivery(m.id),)))
    r, conn, one, two, _ = relay(decider)
    r.received(conn.directions[0], b"V 1\nA 2\n")
    assert two.sent == b"A 2\n" and "m1" in r.pending
    r.apply(Outcome((Delivery("m1"),)))
    assert two.sent == b"A 2\nV 1\n"


def test_a_delayed_message_goes_when_its_time_comes():
    decider = FakeDecider(lambda m: Outcome((Delivery(m.id, 10**15),)))
    r, conn, one, two, _ = relay(decider)
    r.received(conn.directions[0], b"A 1\n")
    assert two.sent == b"" and r.due(0) is not None
    assert r.due(2**63) is None and two.sent == b"A 1\n"


def test_every_delivery_listed_is_written_a_message_listed_twice_twice():
    """Duplicates are the decider's to allow (mallory/mediator/scenario_driver.py)."""
    decider = FakeDecider(lambda m: Outcome((Delivery(m.id), Delivery(m.id))))
    decider.on_delivered = lambda m: Outcome()
    r, conn, one, two, _ = relay(decider)
    r.received(conn.directions[0], b"A 1\n")
    assert two.sent == b"A 1\nA 1\n"


def test_a_decider_that_raises_has_its_message_delivered_and_counted():
    def broken(message):
        raise KeyError("bug")

    r, conn, one, two, _ = relay(FakeDecider(broken))
    r.received(conn.directions[0], b"A 1\n")
    assert two.sent == b"A 1\n" and r.counts["decider_errors"] == 1


def test_a_partial_write_waits_for_the_socket_and_the_receipt_for_the_last_byte():
    decider = FakeDecider()
    r, conn, one, two, _ = relay(decider, room=2)
    r.received(conn.directions[0], b"A 12\n")
    assert two.sent == b"A " and decider.delivered == []
    r.flush(conn.two)
    r.flush(conn.two)
    assert two.sent == b"A 12\n" and [m.id for m in decider.delivered] == ["m1"]


def test_unframed_bytes_pass_undecided_and_the_end_of_stream_follows_the_last_write():
    decider = FakeDecider()
    r, conn, one, two, _ = relay(decider)
    there = conn.directions[0]
    r.received(there, b"A 1\nhalf a line")
    r.received(there, b"")
    assert two.sent == b"A 1\nhalf a line" and two.shut and len(decider.arrived) == 1
    r.received(conn.directions[1], b"")
    assert one.shut and one.closed and two.closed and r.connections == {}


def test_the_answer_direction_is_relayed_too_from_receiver_to_sender():
    decider = FakeDecider()
    r, conn, one, two, spans = relay(decider)
    r.received(conn.directions[1], b"a 1 ok\n")
    assert one.sent == b"a 1 ok\n" and (decider.arrived[0].src, decider.arrived[0].dst) == ("n2", "n1")
    assert spans[0][0] == (0xA090202, 7001, 0xA090102, 40000)


def test_a_connection_not_between_two_nodes_is_closed():
    r = Relay(NODES, stream_factory(LINES), FakeDecider())
    one, two = FakeSocket(), FakeSocket()
    assert r.open(one, two, ("10.9.0.1", 5000), RECEIVER) is None
    assert one.closed and two.closed and r.counts["not_between_nodes"] == 1


def test_a_failed_connect_or_a_reset_closes_both_legs_and_counts_what_was_left():
    decider = FakeDecider()
    r, conn, one, two, _ = relay(decider, room=0)
    r.received(conn.directions[0], b"A 1\n")
    r.failed(conn, conn.two, ConnectionResetError("reset"))
    assert one.closed and two.closed and r.counts["undeliverable"] == 1
    assert one.aborted and two.aborted  # the sender sees the receiver's reset as one
    r2, conn2, one2, two2, _ = relay(FakeDecider())
    r2.connected(conn2, 111)
    assert one2.closed and one2.aborted and r2.counts["connect_failed"] == 1


def test_an_orderly_end_closes_without_a_reset():
    r, conn, one, two, _ = relay(FakeDecider())
    r.received(conn.directions[0], b"")
    r.received(conn.directions[1], b"")
    assert one.closed and two.closed and not one.aborted and not two.aborted


def test_the_end_of_stream_waits_for_the_messages_delayed_before_it():
    """A message delayed in the network arrives before the FIN sent after it; a held one
    does not hold the FIN back."""
    decider = FakeDecider(lambda m: Outcome((Delivery(m.id, 10**6),)) if m.type == "append" else Outcome())
    r, conn, one, two, _ = relay(decider)
    r.received(conn.directions[0], b"A 1\nV 2\n")
    r.received(conn.directions[0], b"")
    assert two.sent == b"" and not two.shut
    r.due(2**63)
    assert two.sent == b"A 1\n" and two.shut
    r.apply(Outcome((Delivery("m2"),)))  # the held vote, released after the FIN went
    assert two.sent == b"A 1\n" and r.counts["undeliverable"] == 1


def test_a_closed_connection_lets_its_held_messages_go():
    decider = FakeDecider(lambda m: Outcome())  # holds everything
    r, conn, one, two, _ = relay(decider)
    r.received(conn.directions[0], b"A 1\nV 2\n")
    assert len(r.pending) == 2
    r.failed(conn, conn.one, ConnectionResetError("reset"))
    assert r.pending == {} and r.counts["undeliverable"] == 2
    assert decider.lost == ["m1", "m2"]  # the decider lets go of them too
    r.apply(Outcome((Delivery("m1"),)))
    assert two.sent == b"" and r.counts["gone"] == 1
    assert decider.lost == ["m1", "m2", "m1"]  # a delivery it ordered that cannot be made


def test_a_message_lost_with_its_connection_is_let_go_by_the_decider_too():
    """Written into a socket that took none of it, then reset: the decider still waited
    for its delivery, and would for ever (one entry per message lost, a leak)."""
    decider = FakeDecider()
    r, conn, one, two, _ = relay(decider, room=0)
    r.received(conn.directions[0], b"A 1\n")
    r.failed(conn, conn.two, ConnectionResetError("reset"))
    assert decider.delivered == [] and decider.lost == ["m1"]
