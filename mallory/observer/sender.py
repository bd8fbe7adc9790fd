"""Observer -> mediator batch transport, the observer's side: `BatchSender`.

Protocol (chosen for latency: one persistent TCP connection with TCP_NODELAY, no request
round trips). The observer writes wire-codec lines (mallory/timeline/codec.py):

    {"clock": ...}                 first on every connection (the node's one ClockPair)
    {"batch": ..., "seq": k, ...}  then batches, seq 0, 1, 2, ... in order

and the mediator answers, also one JSON object a line:

    {"ack": k}                     every batch with seq <= k is ingested
    {"error": "reason", "line": n} line n of this connection was rejected (and counted)

Sequence numbers are assigned when a batch is first sent, never to a batch that was
dropped, so the mediator never waits for a gap. A sent batch is kept until acked and is
sent again, with the same seq, after a reconnect; the mediator drops duplicates. While the
mediator is away, submitted chunks wait in a bounded buffer; on overflow the oldest events
are dropped, counted in `dropped_events`, and reported in the next batch's `lost`.

Both ends set the same TCP keepalive and user timeout (mallory/observer/keepalive.py,
`Keepalive`), so each finds on its own a peer gone without a word (its host, namespace or
link vanished: no FIN, no RST), about `dead_after_s` (40 s) after the peer's last byte.
The mediator ends that observer's connection (an observer that has not found out yet
hears so from the reset its next packet that gets through meets). The sender ends its
connection to such a mediator with ETIMEDOUT (or the error an ICMP message gave, e.g.
EHOSTUNREACH), counted in `SenderStats.ended`, and reconnects and resends what is
unacked, as after any end. It is mostly the user timeout that finds a vanished mediator:
with batches in flight the kernel sends no probes, and once `window` batches are unacked
nothing more is sent, so no send ever blocks (and times out).

Why the kernel's timeout and no deadline for acks of our own ("batches unacked and no ack
for N s"): the mediator acks every batch, so such a deadline would find a vanished
mediator too, but it would also end the connection of one that is alive and slow (starved
of CPU, stopped, busy in its ingest), which a new connection does not help; only the
mediator's kernel has to answer a probe or acknowledge a segment.

Each submitted chunk becomes one batch line, unless its line would be longer than
MAX_BATCH_LINE (mallory/timeline/codec.py), which the mediator refuses to read: then it
goes as several batches, each complete up to the first event of the next.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import orjson

from mallory.observer.keepalive import KEEPALIVE, Keepalive, end_cause
from mallory.timeline.codec import MAX_BATCH_LINE, encode
from mallory.timeline.event import Batch, ClockPair, Event

#: how long the sender waits for a reply or a wake-up before looking again; a submit wakes
#: it at once, so a batch never waits for this
IDLE_POLL_S = 0.5
#: how long a send may block before the connection is given up: the mediator stopped reading
SEND_TIMEOUT_S = 5.0


@dataclass
class SenderStats:
    connected: bool = False
    connects: int = 0
    batches_sent: int = 0  # first sends, not resends
    resent: int = 0
    acked_seq: int = -1
    dropped_events: int = 0
    server_errors: int = 0
    last_error: str = ""
    #: ended connections by cause: "eof" (the mediator closed it), the name of the socket
    #: error that ended it ("ETIMEDOUT" for a mediator gone without a word, see `Keepalive`;
    #: "ECONNRESET" for one whose kernel reset it), or "TimeoutError" (a send blocked for
    #: SEND_TIMEOUT_S: the mediator stopped reading)
    ended: Counter = field(default_factory=Counter)


class _Eof(OSError):
    """The mediator closed the connection."""


class _Chunk:
    __slots__ = ("events", "until_ns", "lost")

    def __init__(self, events: list[Event], until_ns: int, lost: int) -> None:
        self.events = events
        self.until_ns = until_ns
        self.lost = lost


class BatchSender:
    """Sends one node's batches to the mediator from a background thread.

    `submit` never blocks on the network: it appends to the buffer and wakes the thread.
    """

    def __init__(
        self,
        clock: ClockPair,
        address: tuple[str, int],
        *,
        capacity_events: int = 1_000_000,
        window: int = 64,
        backoff_min: float = 0.02,
        backoff_max: float = 1.0,
        keepalive: Keepalive = KEEPALIVE,
    ) -> None:
        self.clock = clock
        self.node = clock.node
        self.address = address
        self.capacity_events = capacity_events
        self.window = window
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.keepalive = keepalive
        self.stats = SenderStats()
        self._lock = threading.Lock()
        self._pending: deque[_Chunk] = deque()
        self._pending_events = 0
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._next_seq = 0
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._run, name=f"batch-sender-{self.node}", daemon=True)

    def start(self) -> "BatchSender":
        self._thread.start()
        return self

    def submit(self, events: list[Event], until_ns: int, lost: int = 0) -> None:
        """Queue the events since the last submit (in ts order), complete up to the node's
        `until_ns`."""
        with self._lock:
            self._pending.append(_Chunk(events, until_ns, lost))
            self._pending_events += len(events)
            self._shed()
        self._wake()

    def pending_events(self) -> int:
        with self._lock:
            return self._pending_events

    def unacked(self) -> int:
        with self._lock:
            return len(self._unacked)

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far is acked; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending and not self._unacked:
                    return True
            time.sleep(0.005)
        return False

    def close(self, timeout: float = 2.0) -> None:
        self._closed = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            wake_r, wake_w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, -1, -1
            os.close(wake_r)
            os.close(wake_w)

    # -- the buffer ---------------------------------------------------------------------

    def _shed(self) -> None:
        """Drop the oldest events beyond capacity; their count rides on the next batch."""
        while self._pending_events > self.capacity_events:
            oldest = self._pending[0]
            excess = self._pending_events - self.capacity_events
            if len(self._pending) > 1 and len(oldest.events) <= excess:
                self._pending.popleft()
                self._pending[0].lost += oldest.lost + len(oldest.events)
                self._pending_events -= len(oldest.events)
                self.stats.dropped_events += len(oldest.events)
            else:
                cut = min(excess, len(oldest.events))
                del oldest.events[:cut]
                oldest.lost += cut
                self._pending_events -= cut
                self.stats.dropped_events += cut

    def _take_lines(self) -> list[bytes]:
        """Number the pending chunks the window allows and move them to the unacked list."""
        lines = []
        with self._lock:
            while self._pending and len(self._unacked) < self.window:
                chunk = self._pending.popleft()
                self._pending_events -= len(chunk.events)
                line = encode(Batch(self.node, self._next_seq, chunk.until_ns, chunk.events, chunk.lost)) + b"\n"
                while len(line) > MAX_BATCH_LINE and len(chunk.events) > 1:
                    # The first half is complete up to the second's first event (ts order).
                    half = len(chunk.events) // 2
                    rest = _Chunk(chunk.events[half:], chunk.until_ns, 0)
                    chunk = _Chunk(chunk.events[:half], rest.events[0].ts, chunk.lost)
                    self._pending.appendleft(rest)
                    self._pending_events += len(rest.events)
                    line = encode(Batch(self.node, self._next_seq, chunk.until_ns, chunk.events, chunk.lost)) + b"\n"
                self._unacked.append((self._next_seq, line))
                self._next_seq += 1
                lines.append(line)
        self.stats.batches_sent += len(lines)
        return lines

    # -- the connection -----------------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already signalled, or closed

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=1.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.keepalive.apply(sock)  # a mediator gone without a word: see the module docstring
        sock.settimeout(SEND_TIMEOUT_S)
        with self._lock:
            resend = [line for _, line in self._unacked]
        sock.sendall(encode(self.clock) + b"\n")
        for line in resend:  # one by one: joined, a full window would be copied once more
            sock.sendall(line)
        self.stats.resent += len(resend)
        self.stats.connects += 1
        self.stats.connected = True
        return sock

    def _on_replies(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                reply = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if "ack" in reply and type(reply["ack"]) is int:
                acked = reply["ack"]
                with self._lock:
                    while self._unacked and self._unacked[0][0] <= acked:
                        self._unacked.popleft()
                self.stats.acked_seq = max(self.stats.acked_seq, acked)
            elif "error" in reply:
                self.stats.server_errors += 1
                self.stats.last_error = str(reply["error"])

    def _run(self) -> None:
        sock: socket.socket | None = None
        backoff = self.backoff_min
        partial = b""
        while not self._closed:
            if sock is None:
                try:
                    sock = self._connect()
                    backoff = self.backoff_min
                    partial = b""
                except OSError:
                    self.stats.connected = False
                    select.select([self._wake_r], [], [], backoff)
                    self._drain_wake()
                    backoff = min(backoff * 2, self.backoff_max)
                    continue
            try:
                for line in self._take_lines():
                    sock.sendall(line)
                readable, _, _ = select.select([sock, self._wake_r], [], [], IDLE_POLL_S)
                if self._wake_r in readable:
                    self._drain_wake()
                if sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        raise _Eof
                    data = partial + data
                    cut = data.rfind(b"\n") + 1
                    partial = data[cut:]
                    self._on_replies(data[:cut])
            except OSError as exc:
                sock.close()
                sock = None
                self.stats.connected = False
                cause = "eof" if isinstance(exc, _Eof) else end_cause(exc)
                self.stats.ended[cause] += 1
        if sock is not None:
            sock.close()
        self.stats.connected = False

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
