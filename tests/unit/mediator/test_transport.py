"""BatchSender <-> BatchServer on loopback, including a mediator restart."""

import socket
import struct
import threading
import time

import orjson

from mallory.errors import MalloryError
from mallory.mediator import receiver as receiver_module
from mallory.mediator.receiver import BatchServer
from mallory.observer import sender as sender_module
from mallory.observer.keepalive import KEEPALIVE, Keepalive
from mallory.observer.sender import BatchSender
from mallory.timeline.codec import MAX_BATCH_LINE
from mallory.timeline.event import ClockPair, Event, Kind


class FakeSink:
    """A fake sink for the transport tests: records what arrives, ignores duplicate seqs."""

    def __init__(self, reject_seq: int | None = None):
        self.clocks: list[ClockPair] = []
        self.batches = {}
        self.arrivals = []
        self.senders = set()  # the clock pairs of the connections batches came on
        self.reject_seq = reject_seq
        self.lock = threading.Lock()

    def on_clock(self, clock):
        with self.lock:
            self.clocks.append(clock)

    def on_batch(self, batch, clock=None):
        if batch.seq == self.reject_seq:
            raise MalloryError(f"seq {batch.seq} refused by the fake")
        with self.lock:
            self.arrivals.append(batch.seq)
            self.senders.add(clock)
            self.batches.setdefault(batch.seq, batch)


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


def events(node, start, n):
    return [Event(node, Kind.SEND, start + i, start + i, "abcd") for i in range(n)]


CLOCK = ClockPair("n1", 1000, 1_700_000_000_000_000_000)


def test_batches_arrive_in_order_and_are_acked():
    sink = FakeSink()
    server = BatchServer("127.0.0.1", 0, sink).start()
    sender = BatchSender(CLOCK, server.address).start()
    try:
        for k in range(20):
            sender.submit(events("n1", k * 10, 3), until_ns=k * 10 + 10)
        assert sender.flush(5.0)
        assert sink.clocks == [CLOCK] and sink.senders == {CLOCK}  # each batch with its connection's clock
        assert sink.arrivals == list(range(20))
        assert sink.batches[7].events == events("n1", 70, 3) and sink.batches[7].until_ns == 80
        assert sender.stats.acked_seq == 19 and sender.unacked() == 0
        assert server.stats.batches == 20 and server.stats.rejected == 0
    finally:
        sender.close()
        server.close()


def test_a_submitted_batch_is_sent_at_once_not_at_the_next_poll(monkeypatch):
    # With an idle poll longer than the wait below, only the submit's wake-up can send it
    # in time, however busy the machine.
    monkeypatch.setattr(sender_module, "IDLE_POLL_S", 60.0)
    sink = FakeSink()
    server = BatchServer("127.0.0.1", 0, sink).start()
    sender = BatchSender(CLOCK, server.address).start()
    try:
        assert wait_for(lambda: sender.stats.connected)
        sender.submit(events("n1", 0, 1), until_ns=1)
        assert wait_for(lambda: sink.arrivals == [0], timeout=20)
    finally:
        sender.close()
        server.close()


def test_mediator_restart_resends_clock_and_resumes_without_gaps():
    sink1 = FakeSink()
    server = BatchServer("127.0.0.1", 0, sink1).start()
    address = server.address
    sender = BatchSender(CLOCK, address, backoff_max=0.1).start()
    try:
        for k in range(5):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        assert sender.flush(5.0)
        server.close()
        assert wait_for(lambda: not sender.stats.connected)
        for k in range(5, 12):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        time.sleep(0.2)
        assert sender.stats.acked_seq == 4
        sink2 = FakeSink()
        server = BatchServer(*address, sink2).start()
        assert sender.flush(5.0)
        assert sink2.clocks == [CLOCK]  # resent on reconnect
        assert sorted(sink2.batches) == list(range(5, 12))  # resumes where the old one stopped
        assert sink2.batches[5].events == events("n1", 50, 2)
        assert sender.stats.connects == 2 and sender.stats.dropped_events == 0
        assert sender.stats.ended == {"eof": 1}  # the closing server's FIN
    finally:
        sender.close()
        server.close()


def test_bounded_buffer_counts_drops_while_mediator_is_away():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = s.getsockname()
    sender = BatchSender(CLOCK, address, capacity_events=10, backoff_max=0.05).start()
    try:
        for k in range(5):
            sender.submit(events("n1", k * 5, 5), until_ns=k * 5 + 5)
        assert sender.pending_events() == 10
        assert sender.stats.dropped_events == 15
        sink = FakeSink()
        server = BatchServer(*address, sink).start()
        try:
            assert sender.flush(5.0)
        finally:
            server.close()
        got = [e for seq in sorted(sink.batches) for e in sink.batches[seq].events]
        assert got == events("n1", 15, 10)  # the newest ten survive
        assert sum(b.lost for b in sink.batches.values()) == 15
        assert sorted(sink.batches) == list(range(len(sink.batches)))  # no seq gaps
    finally:
        sender.close()


def test_malformed_lines_are_rejected_with_a_reason_and_counted():
    sink = FakeSink(reject_seq=1)
    server = BatchServer("127.0.0.1", 0, sink).start()
    try:
        with socket.create_connection(server.address) as conn:
            f = conn.makefile("rb")

            def reply(line: bytes):
                conn.sendall(line + b"\n")
                return orjson.loads(f.readline())

            batch0 = b'{"batch":"n1","seq":0,"until_ns":5,"lost":0,"events":[["SEND",1,2,"ab"]]}'
            assert "before the connection's clock pair" in reply(batch0)["error"]
            assert "not JSON" in reply(b"{nope")["error"]
            assert reply(b'{"clock":"n1","mono_ns":1,"real_ns":2}\n' + batch0) == {"ack": 0}
            assert "unknown event kind" in reply(b'{"batch":"n1","seq":1,"until_ns":5,"events":[["BOOM",1,2,""]]}')["error"]
            assert "refused by the fake" in reply(b'{"batch":"n1","seq":1,"until_ns":9,"events":[]}')["error"]
            assert "on 'n1'" in reply(b'{"batch":"n2","seq":0,"until_ns":5,"events":[]}')["error"]
            assert reply(b'{"batch":"n1","seq":2,"until_ns":9,"events":[]}') == {"ack": 2}
            f.close()  # or the socket stays open when the block closes it
        assert server.stats.rejected == 5
        assert server.stats.batches == 2
        assert any("unknown event kind" in r for r in server.stats.reasons)
        assert wait_for(lambda: server.stats.open_connections == 0)
        assert server.metrics()["ended"] == {"eof": 1}  # rejected lines never end a connection
    finally:
        server.close()


def test_a_line_longer_than_the_batch_bound_is_refused_and_closes_the_connection():
    assert receiver_module.MAX_LINE == MAX_BATCH_LINE
    server = BatchServer("127.0.0.1", 0, FakeSink()).start()
    try:
        with socket.create_connection(server.address) as conn:
            f = conn.makefile("rb")
            clock = b'{"clock":"n1","mono_ns":1,"real_ns":2}\n'
            head = b'{"batch":"n1","seq":0,"until_ns":5,"lost":0,"events":['
            event = b'["FUNC",1,2,""],'
            body = event * (MAX_BATCH_LINE // len(event) + 1)
            conn.sendall(clock + head + body[:-1] + b"]}\n")
            reply = orjson.loads(f.readline())
            assert reply["line"] == 2 and f"longer than {MAX_BATCH_LINE} bytes" in reply["error"]
            assert f.readline() == b""  # closed
        assert server.stats.batches == 0 and server.stats.rejected == 1
        assert wait_for(lambda: server.stats.open_connections == 0)
        assert server.metrics()["ended"] == {"line-too-long": 1}
    finally:
        server.close()


def test_a_batch_whose_line_would_be_too_long_goes_as_several_each_complete_up_to_the_next(monkeypatch):
    monkeypatch.setattr(sender_module, "MAX_BATCH_LINE", 150)
    sink = FakeSink()
    server = BatchServer("127.0.0.1", 0, sink).start()
    sender = BatchSender(CLOCK, server.address).start()
    try:
        sent = events("n1", 100, 10)  # about 25 bytes an event: one line of 297
        sender.submit(sent, until_ns=500, lost=2)
        assert sender.flush(5.0)
        parts = [sink.batches[seq] for seq in sorted(sink.batches)]
        assert len(parts) > 1 and [e for b in parts for e in b.events] == sent
        assert [b.until_ns for b in parts] == [b.events[0].ts for b in parts[1:]] + [500]
        assert [b.lost for b in parts] == [2] + [0] * (len(parts) - 1)
        assert sender.pending_events() == 0
    finally:
        sender.close()
        server.close()


def test_a_reset_connection_ends_counted_by_its_error():
    server = BatchServer("127.0.0.1", 0, FakeSink()).start()
    try:
        conn = socket.create_connection(server.address)
        conn.sendall(b'{"clock":"n1","mono_ns":1,"real_ns":2}\n{"batch":"n1","seq":0')  # and no end
        assert wait_for(lambda: server.stats.records == 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a RST
        assert wait_for(lambda: server.stats.open_connections == 0)
        metrics = server.metrics()
        assert metrics["ended"] == {"ECONNRESET": 1} and metrics["connections"] == 1
        assert metrics["batches"] == 0 and metrics["rejected"] == 0  # the partial line was not read as one
    finally:
        server.close()


def accepted(server: BatchServer) -> socket.socket:
    """The server's side of its one connection."""
    assert wait_for(lambda: len(server._conns) == 1)
    with server._lock:
        return next(iter(server._conns))


def test_accepted_connections_get_tcp_keepalive_that_ends_a_dead_peer_within_a_minute():
    # The bound (and well above any observer's batch interval: see Keepalive).
    assert 30 <= KEEPALIVE.dead_after_s <= 60 and KEEPALIVE.idle_s >= 10
    server = BatchServer("127.0.0.1", 0, FakeSink()).start()
    try:
        with socket.create_connection(server.address):
            conn = accepted(server)
            tcp = socket.IPPROTO_TCP
            assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert conn.getsockopt(tcp, socket.TCP_KEEPIDLE) == KEEPALIVE.idle_s
            assert conn.getsockopt(tcp, socket.TCP_KEEPINTVL) == KEEPALIVE.interval_s
            assert conn.getsockopt(tcp, socket.TCP_KEEPCNT) == KEEPALIVE.probes
            assert conn.getsockopt(tcp, socket.TCP_USER_TIMEOUT) == KEEPALIVE.dead_after_s * 1000
            assert conn.getsockopt(tcp, socket.TCP_NODELAY) == 1
    finally:
        server.close()


#: linux/tcp.h: a socket in repair mode closes without a FIN or RST (what CRIU uses)
TCP_REPAIR = 19


def test_an_observer_gone_without_fin_or_rst_is_found_by_the_first_probe_and_its_connection_ends():
    # A real half-open connection needs the peer's packets lost (a vanished namespace);
    # here the peer's socket vanishes silently, so only a probe from the server can find
    # out (the peer's kernel answers it with a RST): without keepalive the connection's
    # thread would wait for ever.
    sink = FakeSink()
    server = BatchServer("127.0.0.1", 0, sink, keepalive=Keepalive(idle_s=1, interval_s=1, probes=2)).start()
    try:
        peer = socket.create_connection(server.address)
        name = "batch-conn-%s:%d" % peer.getsockname()
        peer.sendall(b'{"clock":"n1","mono_ns":1,"real_ns":2}\n{"batch":"n1","seq":0,"until_ns"')
        assert wait_for(lambda: len(sink.clocks) == 1)
        assert name in [t.name for t in threading.enumerate()]
        peer.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)  # needs CAP_NET_ADMIN: root (tests/conftest.py)
        peer.close()
        time.sleep(0.1)
        assert server.stats.open_connections == 1  # the close said nothing: a probe is yet to come
        assert wait_for(lambda: server.stats.open_connections == 0, timeout=10)
        assert server.metrics()["ended"] == {"ECONNRESET": 1}
        assert wait_for(lambda: name not in [t.name for t in threading.enumerate()])  # and its buffer with it
        assert server.stats.batches == 0 and server.stats.rejected == 0
    finally:
        server.close()
