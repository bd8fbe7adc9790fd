"""The gateway's message layer: a transparent TCP proxy for the SUT's declared peer ports,
which cuts each direction of a peer connection into messages and asks a decider what
becomes of each one (issue 19, part 2).

Packets of a TCP stream cannot be dropped one by one without the stream retransmitting
them, so the gateway terminates every peer connection and relays it message by message:
mallory/mediator/divert.py diverts the connections to this proxy, mallory/mediator/legs.py
keeps the timeline's SEND -> RECV arrows joined across it.

Why TPROXY with IP_TRANSPARENT, not REDIRECT + SO_ORIGINAL_DST: the receiver must see the
sender's own address. The example SUT keeps one peer connection per source address
(suts/example/example_sut.c, accept_into), and libraft and others log or check it; behind a
REDIRECT every connection to a node would come from the gateway's address on that node's
LAN and replace the others. So both legs are transparent: the sender's connection (leg 1)
is accepted with the original destination as its local address (TPROXY keeps it), and the
proxy opens leg 2 from the sender's own address and port (a socket with IP_TRANSPARENT
bound to it) to the original destination. The receiver sees exactly the 4-tuple the
sender opened, and each node's observer sees its own leg's packets as before.

A connection's two directions are relayed alike (a protocol may answer on the connection
it was asked on, as the example SUT does): each direction's bytes go through a
`MessageStream` of the declared format (mallory/observer/framing.py); every whole message
becomes a `Message` (mallory/scenario/events.py: ids "m1", "m2", ... in the order they
arrive) and the decider's `Outcome` says which messages to write now, which after a delay,
and which it will never ask for again (their bytes are let go). A message is written whole,
in the order the outcomes list it: one delivered later than its successors is reordered,
one never delivered is dropped, one delivered twice is duplicated. When a message's last
byte has been handed to the receiver's socket the decider hears of it (`on_delivered`);
when its connection closes before that, it hears that it is lost (`on_lost`).
Bytes that make no message (the stream lost sync, or ended mid-message) are passed on
unframed, in order, undecided. A decider that raises has its message delivered (a bug of
ours must not cut the SUT's links) and is counted.

The decider may also release messages at any time from any thread (`MessageProxy.deliver`:
a filter on a code event releasing a held set); the proxy's thread makes the writes.

End of a connection: a direction's end of stream (FIN) is passed on once everything before
it is written, and once the messages delayed on it have been (a message delayed in the
network still arrives before the FIN that followed it; one held in a set does not hold the
FIN back); messages the decider delivers after that are counted `undeliverable`, as are
writes to a connection that was reset or failed. A reset, a failed read or write, or a
failed connect of leg 2 resets both legs (SO_LINGER 0: the other end sees the RST it
would have seen without the layer, and the gateway keeps no TIME_WAIT socket whose
4-tuple a node's next connection could need); so does the proxy's stop.

Threading: `Relay` holds the connections and makes every decision call and write; it is
driven by one thread (`MessageProxy`'s loop: a selector over the listener, every leg and
a wake pipe, with a timeout at the next delayed delivery). Nothing here runs, and no
socket is open, unless the mediator was given a scenario or filter sets (`mallory mediator
--scenario`, `--filter-sets`).
"""

from __future__ import annotations

import errno
import heapq
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

from mallory.observer.framing import MessageStream, Piece
from mallory.observer.packet import ip_int
from mallory.scenario.events import Message

log = logging.getLogger(__name__)

#: linux/in.h: a socket that may bind a foreign address and accept diverted connections
IP_TRANSPARENT = getattr(socket, "IP_TRANSPARENT", 19)
READ_SIZE = 1 << 16
#: SO_LINGER on, 0 s: close() sends a RST and leaves no TIME_WAIT
_ABORT = struct.pack("ii", 1, 0)
#: a direction's key: its original (source address, source port, destination address,
#: destination port), addresses as 32-bit integers
Key = tuple[int, int, int, int]


class Delivery(NamedTuple):
    """A write of message `message_id`, `delay_ns` from now (0: now)."""

    message_id: str
    delay_ns: int = 0


class Outcome(NamedTuple):
    """What the decider makes of an event: the deliveries, in order (a message may be named
    several times: a duplicate), and the messages it will never deliver again (`forget`:
    the proxy lets their bytes go, after the deliveries listed with them)."""

    deliver: tuple[Delivery, ...] = ()
    forget: tuple[str, ...] = ()


class Decider(Protocol):
    """Decides every message of the proxied connections (mallory/mediator/scenario_driver.py
    drives a scenario's engine with them). Every call comes from the proxy's thread, never
    while the decider is in another of them. The proxy writes every delivery an outcome
    lists: whether a message may go twice is the decider's to say."""

    def on_message(self, message: Message) -> Outcome:
        """`message` has arrived whole at the gateway, from its sender."""
        ...

    def on_delivered(self, message: Message) -> Outcome:
        """`message`'s last byte went to its receiver's socket."""
        ...

    def on_lost(self, message_id: str) -> None:
        """The proxy has let go of message `message_id` without being told to (its
        connection closed), or was told to deliver it after that: it will never be
        delivered, and the decider forgets it. May come more than once for one message."""
        ...


class Conn(Protocol):
    """What the relay needs of a leg's socket (a non-blocking socket.socket)."""

    def send(self, data: bytes, /) -> int: ...

    def shutdown(self, how: int, /) -> None: ...

    def setsockopt(self, level: int, option: int, value: bytes, /) -> None: ...

    def close(self) -> None: ...


class Leg:
    """One socket of a proxied connection and the bytes waiting to be written to it."""

    def __init__(self, sock: Conn, name: str) -> None:
        self.sock = sock
        self.name = name  # "n1->n2 leg 1", for logs
        self.out: deque[tuple[bytes, Message | None]] = deque()
        self.written = 0  # stream offset of the next byte appended to `out`
        self.connected = True
        self.delayed = 0  # delayed deliveries still to be written to this leg
        self.eof_after_out = False  # shut the write side once `out` (and `delayed`) is written
        self.write_shut = False
        self.read_eof = False
        self.closed = False


class Direction(NamedTuple):
    """One direction of a proxied connection: bytes read from `reader` go to `writer`."""

    conn: "Connection"
    src: str
    dst: str
    key: Key
    reader: Leg
    writer: Leg
    stream: MessageStream


class Connection:
    """A proxied connection: leg 1 (the sender's, accepted) and leg 2 (to the receiver)."""

    def __init__(self, number: int, one: Leg, two: Leg) -> None:
        self.number = number
        self.one, self.two = one, two
        self.directions: list[Direction] = []

    @property
    def legs(self) -> tuple[Leg, Leg]:
        return self.one, self.two


class Relay:
    """The proxied connections and what happens to their messages (see the module
    docstring); every method runs in the proxy's thread. `on_written(key, out_offset,
    in_offset, length)` hears of every run of bytes written, where it sits in the
    direction's incoming and outgoing stream (legs.py joins the arrows with it).
    `closing(sock)` hears of every leg's socket just before it is closed (the proxy takes
    it out of its selector then, while its descriptor is still its own)."""

    def __init__(self, node_addresses: Mapping[str, str], new_stream: Callable[[], MessageStream], decider: Decider,
                 *, on_written: Callable[[Key, int, int, int], None] | None = None) -> None:
        self.node_by_ip = {ip_int(address): node for node, address in node_addresses.items()}
        self.new_stream = new_stream
        self.decider = decider
        self.on_written = on_written
        self.closing: Callable[[Conn], None] = lambda sock: None
        self.connections: dict[int, Connection] = {}
        self.pending: dict[str, tuple[Direction, Piece, Message]] = {}
        #: (due ns, order, message id, the leg it goes to or None), a heap
        self._delayed: list[tuple[int, int, str, Leg | None]] = []
        self._order = 0
        self._numbers = 0
        self._messages = 0
        #: legs whose interest changed (output waiting, closed): the loop looks at them
        self.touched: set[Leg] = set()
        self.counts: Counter[str] = Counter()

    # -- connections ---------------------------------------------------------------------

    def open(self, one: Conn, two: Conn, sender: tuple[str, int], receiver: tuple[str, int],
             connected: bool = False) -> Connection | None:
        """A connection accepted from `sender` for `receiver` (leg 1 `one`) and the socket
        connecting to it (leg 2 `two`); None when either end is not a node (both closed)."""
        src, dst = self.node_by_ip.get(ip_int(sender[0])), self.node_by_ip.get(ip_int(receiver[0]))
        if src is None or dst is None:
            one.close()
            two.close()
            self.counts["not_between_nodes"] += 1
            return None
        self._numbers += 1
        a, b = Leg(one, f"{src}->{dst} #{self._numbers} leg 1"), Leg(two, f"{src}->{dst} #{self._numbers} leg 2")
        b.connected = connected
        conn = Connection(self._numbers, a, b)
        there: Key = (ip_int(sender[0]), sender[1], ip_int(receiver[0]), receiver[1])
        back: Key = (there[2], there[3], there[0], there[1])
        conn.directions = [Direction(conn, src, dst, there, a, b, self.new_stream()),
                           Direction(conn, dst, src, back, b, a, self.new_stream())]
        self.connections[conn.number] = conn
        self.counts["connections"] += 1
        return conn

    def connected(self, conn: Connection, error: int) -> None:
        """Leg 2's connect finished (`error` its SO_ERROR, 0 for success); a failed one
        resets leg 1 (the sender's connect succeeded at the gateway, so a refused or
        unreachable receiver is seen as a reset)."""
        if error:
            log.info("message layer: %s: connect failed: %s", conn.two.name, os.strerror(error))
            self.counts["connect_failed"] += 1
            self.close(conn, abort=True)
            return
        conn.two.connected = True
        self.flush(conn.two)

    def received(self, direction: Direction, data: bytes) -> None:
        """Bytes read from `direction`'s reader (b"": its end of stream)."""
        if direction.reader.closed:
            return
        if not data:
            direction.reader.read_eof = True
            for piece in direction.stream.flush():
                self._write_piece(direction, piece, None)
            direction.writer.eof_after_out = True
            self.flush(direction.writer)
            self._close_if_done(direction.conn)
            return
        for piece in direction.stream.feed(data):
            if piece.name is None:
                self.counts["unframed_bytes"] += len(piece.data)
                self._write_piece(direction, piece, None)
                continue
            self._messages += 1
            message = Message(f"m{self._messages}", direction.src, direction.dst, piece.name, piece.data)
            self.pending[message.id] = (direction, piece, message)
            self.counts["messages"] += 1
            self.apply(self._decide(message, arriving=True))

    def failed(self, conn: Connection, leg: Leg, exc: OSError) -> None:
        """A read or write on `leg` failed (a reset, mostly): both legs are reset."""
        log.info("message layer: %s: %s", leg.name, exc)
        self.counts["reset"] += 1
        self.close(conn, abort=True)

    def close(self, conn: Connection, abort: bool = False) -> None:
        """Close both legs (`abort`: with a RST, see the module docstring); what they still
        had to write and the messages of the connection still pending are counted
        `undeliverable` and let go."""
        unwritten: set[str] = set()
        for leg in conn.legs:
            if not leg.closed:
                leg.closed = True
                unwritten.update(m.id for _, m in leg.out if m is not None)
                self.counts["undeliverable"] += sum(1 for _, m in leg.out if m is not None)
                leg.out.clear()
                if abort:
                    try:
                        leg.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
                    except OSError:
                        pass
                self.closing(leg.sock)
                leg.sock.close()
                self.touched.add(leg)
        self.connections.pop(conn.number, None)
        stranded = [mid for mid, (direction, _, _) in self.pending.items() if direction.conn is conn]
        for message_id in stranded:
            del self.pending[message_id]
        self.counts["undeliverable"] += len(set(stranded) - unwritten)
        for message_id in stranded:
            self._lost(message_id)

    def close_all(self, abort: bool = False) -> None:
        for conn in list(self.connections.values()):
            self.close(conn, abort)

    # -- decisions and writes ------------------------------------------------------------

    def apply(self, outcome: Outcome) -> None:
        """Make an outcome's deliveries (now, or queued for later), then forget what it says."""
        now = time.monotonic_ns()
        for delivery in outcome.deliver:
            if delivery.delay_ns > 0:
                found = self.pending.get(delivery.message_id)
                writer = found[0].writer if found is not None else None
                if writer is not None:
                    writer.delayed += 1  # its FIN waits for this one
                self._order += 1
                heapq.heappush(self._delayed, (now + delivery.delay_ns, self._order, delivery.message_id, writer))
            else:
                self._deliver(delivery.message_id)
        for message_id in outcome.forget:
            self.pending.pop(message_id, None)

    def due(self, now: int) -> int | None:
        """Make the delayed deliveries whose time has come; the next one's due time or None."""
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, message_id, writer = heapq.heappop(delayed)
            if writer is not None:
                writer.delayed -= 1
            self._deliver(message_id)
            if writer is not None and not writer.delayed:
                self.flush(writer)  # a FIN that waited for it goes now
        return delayed[0][0] if delayed else None

    def _deliver(self, message_id: str) -> None:
        found = self.pending.get(message_id)
        if found is None:
            self.counts["gone"] += 1  # forgotten before: nothing left to write
            self._lost(message_id)
            return
        direction, piece, message = found
        if direction.writer.closed or direction.writer.write_shut:
            self.counts["undeliverable"] += 1
            return
        self._write_piece(direction, piece, message)

    def _write_piece(self, direction: Direction, piece: Piece, message: Message | None) -> None:
        writer = direction.writer
        if writer.closed:
            return
        if self.on_written is not None:
            self.on_written(direction.key, writer.written, piece.offset, len(piece.data))
        writer.written += len(piece.data)
        writer.out.append((piece.data, message))
        self.flush(writer)

    def flush(self, leg: Leg) -> None:
        """Write what `leg` holds as far as its socket takes it; tell the decider of each
        message written whole."""
        if leg.closed or not leg.connected:
            return
        written: list[Message] = []
        out = leg.out
        try:
            while out:
                data, message = out[0]
                n = leg.sock.send(data)
                if n < len(data):
                    out[0] = (data[n:], message)
                    break
                out.popleft()
                if message is not None:
                    written.append(message)
            if not out and leg.eof_after_out and not leg.delayed and not leg.write_shut:
                leg.write_shut = True
                leg.sock.shutdown(socket.SHUT_WR)
        except BlockingIOError:
            pass
        except OSError as exc:
            conn = self._connection_of(leg)
            if conn is not None:
                self.failed(conn, leg, exc)
            return
        finally:
            self.touched.add(leg)
        for message in written:
            self.counts["delivered"] += 1
            self.apply(self._decide(message, arriving=False))
        conn = self._connection_of(leg)
        if conn is not None:
            self._close_if_done(conn)

    def _decide(self, message: Message, arriving: bool) -> Outcome:
        """The decider's outcome for `message` arriving (or delivered); an arriving message
        is delivered when the decider fails."""
        try:
            return self.decider.on_message(message) if arriving else self.decider.on_delivered(message)
        except Exception as exc:  # the decider's bug must not cut the SUT's links
            self.counts["decider_errors"] += 1
            log.warning("message layer: the decider failed on %s (delivered as is): %s: %s",
                        message, type(exc).__name__, exc)
            return Outcome((Delivery(message.id),) if arriving else ())

    def _lost(self, message_id: str) -> None:
        """The decider hears that `message_id` will never be delivered."""
        try:
            self.decider.on_lost(message_id)
        except Exception as exc:  # as in _decide: the decider's bug must not stop the relay
            self.counts["decider_errors"] += 1
            log.warning("message layer: the decider failed on losing %s: %s: %s", message_id, type(exc).__name__, exc)

    def _connection_of(self, leg: Leg) -> Connection | None:
        for conn in self.connections.values():
            if leg is conn.one or leg is conn.two:
                return conn
        return None

    def _close_if_done(self, conn: Connection) -> None:
        """Both directions ended and written out: the connection is closed."""
        if all(d.reader.read_eof and d.writer.write_shut for d in conn.directions):
            self.close(conn)


class MessageProxy:
    """The proxy's listener and its thread (see the module docstring): `start`, `deliver`
    from any thread, `stop`."""

    def __init__(self, relay: Relay, port: int, address: str = "0.0.0.0") -> None:
        self.relay = relay
        self.port = port
        self.address = address
        self._incoming: deque[Outcome] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = False
        self._stopped = False
        #: `deliver` (any thread) and `stop` closing the wake pipe: a wake byte written after
        #: the close would go to whatever file has the descriptor number by then
        self._wake_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self._legs: dict[int, tuple[Connection, Leg, Direction | None]] = {}  # fd -> ...
        self.error: BaseException | None = None

    def start(self) -> MessageProxy:
        listener = self._listen()
        self._listener = listener
        self.relay.closing = self._forget
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="message-layer", daemon=True)
        self._thread.start()
        return self

    def _listen(self) -> socket.socket:
        """The listener the diverted connections arrive at (IP_TRANSPARENT: TPROXY hands it
        connections for addresses that are not the gateway's)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
            listener.bind((self.address, self.port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        return listener

    def _original_destination(self, one: socket.socket) -> tuple[str, int]:
        """Where the sender of accepted leg 1 `one` was connecting to: with TPROXY, the
        accepted socket's own address."""
        return one.getsockname()

    def _dial(self, sender: tuple[str, int], receiver: tuple[str, int]) -> tuple[socket.socket, int]:
        """Leg 2, from the sender's own address and port (IP_TRANSPARENT) to the receiver,
        connecting without blocking: the socket and connect_ex's status. Its 4-tuple is
        leg 1's with the roles swapped, which the kernel keeps apart: the accepted socket is
        (local receiver, remote sender) and this one (local sender, remote receiver), two
        different keys of its connection table, and no other socket of the gateway is bound
        to the sender's address (SO_REUSEADDR lets it bind beside a TIME_WAIT socket of an
        earlier connection from that port)."""
        two = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            two.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            two.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
            two.bind(sender)  # the receiver sees the sender's own address and port
            two.setblocking(False)
            return two, two.connect_ex(receiver)
        except OSError:
            two.close()
            raise

    def deliver(self, outcome: Outcome) -> None:
        """Make `outcome` in the proxy's thread (from any thread); after the stop, nothing."""
        with self._wake_lock:
            if self._stopped:
                return
            self._incoming.append(outcome)
            try:
                os.write(self._wake_w, b"x")
            except OSError:  # the pipe is full: the loop is woken already
                pass

    def stop(self) -> None:
        """Stop the loop (which resets every proxied connection) and close what it used;
        again, nothing more."""
        if self._stopped:
            return
        self._stop = True
        self.deliver(Outcome())
        if self._thread is not None:
            self._thread.join(2.0)
        if self._thread is None or not self._thread.is_alive():
            with self._wake_lock:
                self._stopped = True
                self._selector.close()
                os.close(self._wake_r)
                os.close(self._wake_w)

    # -- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        relay = self.relay
        try:
            next_due: int | None = None
            while not self._stop:
                timeout = None if next_due is None else max(0.0, (next_due - time.monotonic_ns()) / 1e9)
                accept = woken = False
                # Legs first, accepts last: a leg closed while this batch is handled gives its
                # descriptor back, and a socket accepted in the same batch may get it; the
                # batch's events for it were the old socket's.
                for key, events in self._selector.select(0.5 if timeout is None else min(timeout, 0.5)):
                    if key.data == "listener":
                        accept = True
                    elif key.data == "wake":
                        woken = True
                    else:
                        self._ready(key.fd, events)
                if woken:
                    self._woken()
                if accept:
                    self._accept()
                next_due = relay.due(time.monotonic_ns())
                self._update_interest()
        except BaseException as exc:
            self.error = exc
            log.exception("message layer: its loop stopped")
        finally:
            relay.close_all(abort=True)
            if self._listener is not None:
                self._listener.close()

    def _woken(self) -> None:
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        while self._incoming:
            self.relay.apply(self._incoming.popleft())

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                one, sender = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. EMFILE: the connection waits in the backlog
                log.warning("message layer: accept failed: %s", exc)
                self.relay.counts["accept_failed"] += 1
                return
            receiver = self._original_destination(one)
            one.setblocking(False)
            try:
                two, status = self._dial(sender, receiver)
            except OSError as exc:
                log.warning("message layer: cannot open %s:%d -> %s:%d transparently: %s", *sender, *receiver, exc)
                self.relay.counts["connect_failed"] += 1
                _abort(one)
                continue
            if status not in (0, errno.EINPROGRESS):
                self.relay.counts["connect_failed"] += 1
                _abort(one)
                two.close()
                continue
            for sock in (one, two):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = self.relay.open(one, two, sender, receiver, connected=status == 0)
            if conn is None:
                continue
            there, back = conn.directions
            self._legs[one.fileno()] = (conn, conn.one, there)
            self._legs[two.fileno()] = (conn, conn.two, back)
            self._selector.register(one, selectors.EVENT_READ, "leg")
            self._selector.register(two, selectors.EVENT_WRITE if status else selectors.EVENT_READ, "leg")

    def _forget(self, sock: Conn) -> None:
        """`sock` is about to be closed: out of the selector and the table while its
        descriptor is still its own (the Relay's `closing`)."""
        assert isinstance(sock, socket.socket)
        fd = sock.fileno()
        if fd < 0:
            return
        self._legs.pop(fd, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _ready(self, fd: int, events: int) -> None:
        found = self._legs.get(fd)
        if found is None or found[1].closed:
            return
        conn, leg, direction = found
        sock = leg.sock
        assert isinstance(sock, socket.socket)
        if events & selectors.EVENT_WRITE:
            if not leg.connected:
                self.relay.connected(conn, sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            else:
                self.relay.flush(leg)
        if events & selectors.EVENT_READ and not leg.closed and direction is not None:
            try:
                data = sock.recv(READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                self.relay.failed(conn, leg, exc)
                return
            self.relay.received(direction, data)

    def _update_interest(self) -> None:
        """Each touched leg: read while its stream is open, write while it has output or
        its connect is under way (a closed one has left the selector already: `_forget`)."""
        touched, self.relay.touched = self.relay.touched, set()
        for leg in touched:
            if leg.closed:
                continue
            sock = leg.sock
            assert isinstance(sock, socket.socket)
            events = 0 if leg.read_eof else selectors.EVENT_READ
            if leg.out or not leg.connected:
                events |= selectors.EVENT_WRITE
            try:
                if events:
                    self._selector.modify(sock, events, "leg")
                else:
                    self._selector.unregister(sock)
            except (KeyError, ValueError):
                if events:
                    self._selector.register(sock, events, "leg")


def _abort(sock: socket.socket) -> None:
    """Close `sock` with a RST (see the module docstring)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
    except OSError:
        pass
    sock.close()
