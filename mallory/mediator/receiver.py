"""Observer -> mediator batch transport, the mediator's side: `BatchServer`.

The protocol is described in mallory/observer/sender.py. One thread per observer
connection (a cluster has a handful of nodes): it decodes each line with the wire codec,
hands clock pairs and batches to the sink, and answers {"ack": seq} or
{"error": reason, "line": n}. A rejected line is counted and skipped; the connection and
the mediator keep going.

A connection ends when the observer closes it, on a line longer than MAX_LINE, on an error
of its socket, or at `close`; its thread, its read buffer and any partial line go with it,
and `ReceiverStats.ended` counts the end by its cause. An observer whose host, namespace or
link vanished without a FIN or RST is found by TCP keepalive (`Keepalive`,
mallory/observer/keepalive.py, which the observer's sender sets too): its connection ends
with ETIMEDOUT within `Keepalive.dead_after_s` of its last byte.

Why keepalive and no read timeout: only the observer's kernel has to answer a probe, so an
observer that is alive but sends nothing for a while (stopped, starved of CPU, busy with a
burst, or run with a long `--interval`, which the mediator is never told) keeps its
connection, and only a peer that is gone loses it. A read timeout would have to guess the
observer's interval and would drop such an observer (which would reconnect and resend, but
its node's timeline would wait meanwhile).
"""

from __future__ import annotations

import socket
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from mallory.errors import MalloryError
from mallory.observer.keepalive import KEEPALIVE, Keepalive, end_cause
from mallory.timeline.codec import MAX_BATCH_LINE, MalformedRecord, decode
from mallory.timeline.event import Batch, ClockPair

#: A line longer than this is refused (after reading this much of it) and closes the
#: connection: no connection's thread ever holds or decodes more (its malloc arena would
#: keep the high-water mark). Observers split their batches below it. An observer older
#: than that bound (one whose image predates it) has a longer line refused again after each
#: reconnect, so its node's timeline stops at that batch and the refusals show in the
#: mediator's metrics: a mediator and its observers are meant to come from one install.
MAX_LINE = MAX_BATCH_LINE


class BatchSink(Protocol):
    def on_clock(self, clock: ClockPair) -> None: ...

    def on_batch(self, batch: Batch, clock: ClockPair | None = None) -> None:
        """Take a batch that came after `clock` on its connection (duplicates, and batches of
        an observer incarnation a newer clock pair replaced, are the sink's to ignore);
        raise MalloryError to reject."""
        ...


@dataclass
class ReceiverStats:
    connections: int = 0
    open_connections: int = 0
    records: int = 0
    batches: int = 0
    rejected: int = 0
    reasons: deque = field(default_factory=lambda: deque(maxlen=20))
    #: ended connections by cause: "eof" (the observer closed it, or `close` did),
    #: "line-too-long", the name of the socket error that ended it ("ETIMEDOUT" for an
    #: observer gone without a word, see `Keepalive`; "ECONNRESET" for one whose kernel reset
    #: it), or "error" (an exception of ours, a bug)
    ended: Counter = field(default_factory=Counter)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons.append(reason)


class BatchServer:
    """Listens for observers on (host, port); port 0 picks a free one (see `address`).
    Accepted connections get `keepalive`."""

    def __init__(self, host: str, port: int, sink: BatchSink, *, keepalive: Keepalive = KEEPALIVE) -> None:
        self.sink = sink
        self.keepalive = keepalive
        self.stats = ReceiverStats()
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, port), backlog=64)
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="batch-server", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._listener.getsockname()[:2]

    def start(self) -> "BatchServer":
        self._thread.start()
        return self

    def metrics(self) -> dict:
        """The counters, as the mediator's metrics show them under "receiver". `ended` and
        `reasons` are copied under the lock their updates take: a Counter or deque that
        changes while it is copied raises."""
        with self._lock:
            stats = self.stats
            return {
                "connections": stats.connections,
                "open_connections": stats.open_connections,
                "ended": dict(stats.ended),
                "batches": stats.batches,
                "rejected": stats.rejected,
                "reasons": list(stats.reasons),
            }

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.keepalive.apply(conn)
            with self._lock:
                self._conns.add(conn)
                self.stats.connections += 1
                self.stats.open_connections += 1
            name = f"batch-conn-{peer[0]}:{peer[1]}"
            threading.Thread(target=self._serve, args=(conn,), name=name, daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        clock: ClockPair | None = None  # the connection's: which observer incarnation sends
        ended = "error"  # unless set below: not the socket's (a bug; the thread's traceback says)
        stream = conn.makefile("rb")
        try:
            lineno = 0
            while True:
                line = stream.readline(MAX_LINE + 1)
                if not line:
                    ended = "eof"
                    return
                lineno += 1
                if len(line) > MAX_LINE:
                    ended = "line-too-long"
                    self._reject(conn, f"line {lineno} longer than {MAX_LINE} bytes; closing", lineno)
                    return
                if not line.strip():
                    continue
                try:
                    record = decode(line, lineno, "observer")
                    self.stats.records += 1
                    if isinstance(record, ClockPair):
                        if clock is not None and record.node != clock.node:
                            raise MalloryError(f"clock pair for {record.node!r} on {clock.node!r}'s connection")
                        clock = record
                        self.sink.on_clock(record)
                    elif isinstance(record, Batch):
                        if clock is None:
                            raise MalloryError("a batch before the connection's clock pair")
                        if record.node != clock.node:
                            raise MalloryError(f"batch for {record.node!r} on {clock.node!r}'s connection")
                        self.sink.on_batch(record, clock)
                        self.stats.batches += 1
                        conn.sendall(b'{"ack":%d}\n' % record.seq)
                    else:
                        raise MalloryError("a bare event is not a batch or clock pair")
                except MalformedRecord as exc:
                    self._reject(conn, exc.reason, lineno)
                except MalloryError as exc:
                    self._reject(conn, str(exc), lineno)
        except OSError as exc:
            ended = end_cause(exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
                self.stats.open_connections -= 1
                self.stats.ended[ended] += 1
            stream.close()  # with the partial line it may hold; the socket's descriptor
            conn.close()  # is closed by the later of these two

    def _reject(self, conn: socket.socket, reason: str, lineno: int) -> None:
        with self._lock:
            self.stats.reject(reason)
        conn.sendall(orjson.dumps({"error": reason, "line": lineno}) + b"\n")
