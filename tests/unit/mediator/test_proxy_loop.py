"""The message layer's proxy loop (mallory/mediator/proxy.py, `MessageProxy`) on loopback
sockets: a fake subclass listens and dials plainly (no TPROXY, no IP_TRANSPARENT, which
need root and the gateway's rules), so the loop's own work is what is tested: accepting,
relaying whole messages both ways, churn of connections whose descriptors are reused,
resets passed on as resets, and a stop that resets what is still open."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from mallory.mediator.proxy import Delivery, MessageProxy, Outcome, Relay
from mallory.observer.framing import stream_factory
from mallory.observer.messages import parse_messages

LINES = parse_messages({"delimiter": "\n", "type": {"names": {"65": "append", "86": "vote"}}}, "t")
SENDER_IP, RECEIVER_IP = "127.0.0.3", "127.0.0.2"
NODES = {"n1": SENDER_IP, "n2": RECEIVER_IP}


class DeliverAll:
    """A decider that delivers every message at once and lets it go once written."""

    def on_message(self, message):
        return Outcome((Delivery(message.id),))

    def on_delivered(self, message):
        return Outcome(forget=(message.id,))

    def on_lost(self, message_id):
        pass


class FakeTransparentProxy(MessageProxy):
    """A fake MessageProxy: a plain listener on 127.0.0.1, every accepted connection's
    original destination is `receiver`, and leg 2 is a plain connect from the sender's
    address (an ephemeral port)."""

    def __init__(self, relay: Relay, receiver: tuple[str, int]) -> None:
        super().__init__(relay, 0, "127.0.0.1")
        self.receiver = receiver

    def _listen(self) -> socket.socket:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        return listener

    def _original_destination(self, one):
        return self.receiver

    def _dial(self, sender, receiver):
        two = socket.socket()
        two.bind((sender[0], 0))
        two.setblocking(False)
        return two, two.connect_ex(receiver)


class Receiver:
    """The receiving node: accepts on RECEIVER_IP and keeps what each connection got and
    how it ended ("eof" or "reset")."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind((RECEIVER_IP, 0))
        self.listener.listen(256)
        self.address = self.listener.getsockname()
        self.got: list[bytes] = []
        self.ends: list[str] = []
        self.conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        data, end = b"", "eof"
        try:
            while chunk := conn.recv(4096):
                data += chunk
        except ConnectionResetError:
            end = "reset"
        with self._lock:
            self.got.append(data)
            self.ends.append(end)

    def close(self) -> None:
        self.listener.close()
        for conn in self.conns:
            conn.close()


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


@pytest.fixture
def layer():
    receiver = Receiver()
    relay = Relay(NODES, stream_factory(LINES), DeliverAll())
    proxy = FakeTransparentProxy(relay, receiver.address).start()
    yield proxy, relay, receiver
    proxy.stop()
    receiver.close()


def dial(proxy: MessageProxy) -> socket.socket:
    sock = socket.socket()
    sock.bind((SENDER_IP, 0))
    sock.connect(("127.0.0.1", proxy.port))
    return sock


def abort(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_messages_cross_and_a_closed_connection_ends_the_other_leg(layer):
    proxy, relay, receiver = layer
    sock = dial(proxy)
    sock.sendall(b"A 1\nV 2\n")
    sock.shutdown(socket.SHUT_WR)
    wait_for(lambda: receiver.got)
    assert receiver.got == [b"A 1\nV 2\n"] and receiver.ends == ["eof"]
    assert relay.counts["messages"] == 2 and relay.counts["delivered"] == 2
    sock.close()


def test_churn_reuses_descriptors_and_the_loop_survives(layer):
    """Connections reset by their sender while others are accepted: each reset closes a
    leg pair whose descriptors the next accept may get in the same round of the loop."""
    proxy, relay, receiver = layer
    for _ in range(60):
        abort(dial(proxy))
        survivor = dial(proxy)
        survivor.sendall(b"A 1\n")
        abort(survivor)
    wait_for(lambda: relay.counts["connections"] == 120 and not relay.connections)
    assert proxy.error is None and proxy._thread.is_alive()
    sock = dial(proxy)
    sock.sendall(b"V 9\n")
    sock.shutdown(socket.SHUT_WR)
    wait_for(lambda: b"V 9\n" in receiver.got)
    sock.close()


def test_a_reset_by_the_sender_reaches_the_receiver_as_a_reset(layer):
    proxy, relay, receiver = layer
    sock = dial(proxy)
    sock.sendall(b"A 1\n")
    wait_for(lambda: relay.counts["delivered"] == 1)
    abort(sock)
    wait_for(lambda: receiver.ends)
    assert receiver.ends == ["reset"] and receiver.got == [b"A 1\n"]


def test_stop_resets_the_connections_still_open(layer):
    proxy, relay, receiver = layer
    sock = dial(proxy)
    sock.sendall(b"A 1\n")
    wait_for(lambda: relay.counts["delivered"] == 1)
    proxy.stop()
    wait_for(lambda: receiver.ends)
    assert receiver.ends == ["reset"]
    with pytest.raises(ConnectionResetError):
        sock.recv(10)
    sock.close()


def test_a_release_after_the_stop_writes_to_no_descriptor():
    """The ingest or the API may still release messages while the mediator stops: the
    proxy's wake pipe is closed by then, and its descriptor number may already be another
    file's, which must not get the wake byte."""
    proxy = MessageProxy(Relay(NODES, stream_factory(LINES), DeliverAll()), 0)
    proxy.stop()  # never started: the pipe closes at once
    other_r, other_w = os.pipe()  # the lowest free descriptors: the wake pipe's
    try:
        os.set_blocking(other_r, False)
        proxy.deliver(Outcome((Delivery("m1"),)))
        with pytest.raises(BlockingIOError):
            os.read(other_r, 1)
    finally:
        os.close(other_r)
        os.close(other_w)
