"""BatchSender against a fake mediator on loopback: its connection's keepalive, a mediator
gone without a word, and one that is alive but acks nothing. (The sender against the real
BatchServer: tests/unit/mediator/test_transport.py.)"""

import ctypes
import socket
import struct
import threading
import time

import orjson

from mallory.observer.keepalive import KEEPALIVE, Keepalive
from mallory.observer.sender import BatchSender
from tests.unit.mediator.test_transport import CLOCK, events, wait_for

#: dead after 2 s: long enough for a loopback, short enough for a unit test
QUICK = Keepalive(idle_s=1, interval_s=1, probes=1)

#: linux/filter.h: SO_ATTACH_FILTER, and a classic BPF program of one instruction,
#: BPF_RET|BPF_K 0: keep no byte of any packet
SO_ATTACH_FILTER = 26
DROP_ALL = struct.pack("HBBI", 0x06, 0, 0, 0)


class FakeMediator:
    """A fake mediator: a plain listening socket on loopback that accepts connections,
    keeps the records each brings, and acks each batch while `acking`. `go_silent` makes
    a connection's socket drop every packet that reaches it, unanswered (a socket filter,
    which needs no root): to the sender, as if the mediator's host had vanished without a
    FIN or RST."""

    def __init__(self, acking: bool = True) -> None:
        self.acking = acking
        self.conns: list[tuple[socket.socket, list[dict]]] = []
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        threading.Thread(target=self._accept, daemon=True).start()

    def records(self, k: int) -> list[dict]:
        with self.lock:
            return list(self.conns[k][1]) if k < len(self.conns) else []

    def seqs(self, k: int) -> list[int]:
        """The seq of each batch connection `k` brought, in order."""
        return [r["seq"] for r in self.records(k) if "batch" in r]

    def go_silent(self, k: int) -> None:
        program = ctypes.create_string_buffer(DROP_ALL)  # struct sock_fprog: length, pointer
        self.conns[k][0].setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HP", 1, ctypes.addressof(program)))

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        with self.lock:
            for conn, _ in self.conns:
                conn.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            records: list[dict] = []
            with self.lock:
                self.conns.append((conn, records))
            threading.Thread(target=self._serve, args=(conn, records), daemon=True).start()

    def _serve(self, conn: socket.socket, records: list[dict]) -> None:
        try:
            with conn.makefile("rb") as lines:
                for line in lines:
                    record = orjson.loads(line)
                    with self.lock:
                        records.append(record)
                    if self.acking and "batch" in record:
                        conn.sendall(b'{"ack":%d}\n' % record["seq"])
        except OSError:
            pass  # closed by `close`


class RecordingSender(BatchSender):
    """A BatchSender that keeps the socket of each connection it makes, to be looked at."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sockets: list[socket.socket] = []

    def _connect(self) -> socket.socket:
        sock = super()._connect()
        self.sockets.append(sock)
        return sock


def test_the_senders_connection_gets_the_same_keepalive_as_the_mediators():
    fake = FakeMediator()
    sender = RecordingSender(CLOCK, fake.address).start()
    try:
        for k in range(3):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        assert sender.flush(5.0)
        sock, tcp = sender.sockets[0], socket.IPPROTO_TCP
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(tcp, socket.TCP_KEEPIDLE) == KEEPALIVE.idle_s
        assert sock.getsockopt(tcp, socket.TCP_KEEPINTVL) == KEEPALIVE.interval_s
        assert sock.getsockopt(tcp, socket.TCP_KEEPCNT) == KEEPALIVE.probes
        assert sock.getsockopt(tcp, socket.TCP_USER_TIMEOUT) == KEEPALIVE.dead_after_s * 1000
        assert sock.getsockopt(tcp, socket.TCP_NODELAY) == 1
        assert sender.stats.connects == 1 and not sender.stats.ended
    finally:
        sender.close()
        fake.close()


def _found_dead(in_flight: int) -> None:
    """A mediator that acked seq 0-2 goes silent, with `in_flight` batches sent to it after:
    the sender ends the connection with ETIMEDOUT `QUICK.dead_after_s` on, reconnects, and
    sends those batches again, with their seqs, on the new connection."""
    fake = FakeMediator()
    sender = BatchSender(CLOCK, fake.address, keepalive=QUICK, backoff_max=0.1).start()
    try:
        for k in range(3):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        assert sender.flush(5.0)
        fake.go_silent(0)
        silent_at = time.monotonic()
        for k in range(3, 3 + in_flight):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        assert wait_for(lambda: len(fake.records(1)) == 1 + in_flight, timeout=QUICK.dead_after_s + 10)
        took = time.monotonic() - silent_at
        assert took >= QUICK.dead_after_s - 0.5, took  # not ended by anything quicker
        assert sender.stats.ended == {"ETIMEDOUT": 1} and sender.stats.connects == 2
        assert fake.records(1)[0]["clock"] == "n1"
        assert fake.seqs(0) == [0, 1, 2]  # what was sent after the silence never arrived
        assert fake.seqs(1) == list(range(3, 3 + in_flight)) and sender.stats.resent == in_flight
        assert sender.flush(5.0) and sender.stats.acked_seq == 2 + in_flight
    finally:
        sender.close()
        fake.close()


def test_a_mediator_gone_without_a_word_with_batches_in_flight_is_found_by_the_user_timeout():
    # The kernel sends no keepalive probe while data is unacknowledged: TCP_USER_TIMEOUT ends it.
    _found_dead(in_flight=2)


def test_a_mediator_gone_without_a_word_while_the_sender_is_quiet_is_found_by_keepalive():
    _found_dead(in_flight=0)


def test_a_mediator_that_is_alive_but_acks_nothing_keeps_its_connection():
    # Stopped or slow: its kernel acknowledges the batches and answers the probes, so
    # twice the dead time without an ack of ours ends nothing (a new connection would
    # not make it ack sooner).
    fake = FakeMediator(acking=False)
    sender = BatchSender(CLOCK, fake.address, keepalive=QUICK).start()
    try:
        for k in range(5):
            sender.submit(events("n1", k * 10, 2), until_ns=k * 10 + 10)
        assert wait_for(lambda: fake.seqs(0) == [0, 1, 2, 3, 4])
        time.sleep(2 * QUICK.dead_after_s)
        assert sender.stats.connects == 1 and not sender.stats.ended and sender.stats.connected
        assert sender.unacked() == 5 and len(fake.conns) == 1
        fake.conns[0][0].sendall(b'{"ack":4}\n')  # it comes back
        assert sender.flush(5.0) and sender.stats.acked_seq == 4
    finally:
        sender.close()
        fake.close()
