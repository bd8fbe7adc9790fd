"""Cutting TCP streams into messages and naming them, packet by packet (pure: no I/O).

The observer calls `MessageSplitter.data(packet)` for every packet it captures; on a TCP
flow to or from a declared port (mallory/observer/messages.py) the answer is the packet's
event data: the type names of the messages that start in it (`message_data`: sorted, each
once, "+"-joined), CONTINUATION when it starts none, UNKNOWN_MESSAGE when this observer
cannot tell. Other packets get None (the caller keeps its payload hex).

Each direction of a connection is a `Flow`, fed its segments in arrival order:

* Order. A flow tracks the next stream byte it expects by sequence number (unwrapped to
  64 bits). A segment that repeats bytes already seen (a retransmission, a duplicate, a
  late original) gets the names of the messages remembered there (the last RECENT
  names), so both copies of a packet read alike. A segment beyond a gap is framed at once
  when the gap lies inside the body of the current message (a length-framed message); else
  it is held (at most MAX_PENDING segments / MAX_PENDING_BYTES), reads UNKNOWN_MESSAGE, and
  is framed, silently, once the gap is filled.
* Attribution. A message's name goes to the packet holding the last byte its name and
  length needed (its header): almost always the packet where it starts; a header split
  across two segments names it in the second.
* Sync. A SYN starts a flow in sync, its first message flagged `first` (a handshake). A
  flow met mid-stream (an observer restarted, a flow forgotten) or that lost sync (a
  length past `max`, a framer that says None, held segments overflowing, a header longer
  than MAX_HEAD) is out of sync: its packets read UNKNOWN_MESSAGE until it resyncs. A
  delimited flow resyncs after its next delimiter. A length-framed flow resyncs at the
  next segment that starts a TCP write (the one before it carried PSH; the first segment
  of a flow met mid-stream counts too): a message is assumed to start there, and the
  framing's own checks (credible length, a framer's validation) reject a wrong guess.
  Linux can set PSH inside a large write, so a weak framing can resync falsely for a
  while; libraft's framer checks every header field it can.
* Memory. Per flow at most MAX_HEAD bytes of a header, the held segments and RECENT
  names; a flow is forgotten on FIN or RST, after IDLE_NS without packets, and the
  oldest ones when a node has MAX_FLOWS.

A `Cutter` (the declarative length framing below, or a Python framer such as libraft's,
mallory/suts/raft_kv/wire.py) answers, for the first bytes of a message, how long it is and
what it is called.

`MessageStream` is the same framing for a reader that holds the stream itself rather than
its packets (the gateway's message layer, mallory/mediator/proxy.py, which reads each
direction of a connection from a socket, from its first byte): no gaps, retransmissions or
guesses, whole messages with their bytes, and no resync: once a stream's bytes stop making
messages, the rest of it is passed on unframed.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from mallory.observer.messages import (
    DEFAULT_MAX_LENGTH,
    LengthField,
    MessageFormat,
    PeerMessages,
    TypeField,
    resolve_reference,
)
from mallory.timeline.event import UNKNOWN_MESSAGE, is_message_name, message_data

MAX_HEAD = 64 << 10
MAX_PENDING = 16
MAX_PENDING_BYTES = 64 << 10
RECENT = 64
MAX_FLOWS = 4096
IDLE_NS = 120 * 10**9
#: the name of a message a classifier failed on (raised, or returned no valid name)
UNCLASSIFIED = "unclassified"

_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_FIN, _SYN, _RST, _PSH = 0x01, 0x02, 0x04, 0x08
_PORTS = struct.Struct("!HH")
_U32 = struct.Struct("!I")
_U16 = struct.Struct("!H")
_INT = {1: "B", 2: "H", 4: "I", 8: "Q"}


class Cutter(Protocol):
    """How a length-framed stream is cut.

    `cut(head, first)`: `head` is the first bytes of a message (at least what the last
    answer asked for, at most `peek` more or to the end of the packet); `first` says it
    is the first message of a stream seen from its SYN. The answer:
      (length, name)  the message is `length` >= 1 bytes long, named `name` (a valid
                      message name, mallory/timeline/event.py);
      n (an int)      say again with at least n > len(head) bytes (at most MAX_HEAD, and
                      never more than the message holds);
      None            these bytes cannot start a message: the flow lost sync.
    It must not keep state between calls: one cutter serves every flow.
    """

    peek: int

    def cut(self, head: bytes, first: bool) -> tuple[int, str] | int | None: ...


def _field(offset: int, size: int, order: str) -> Callable[[bytes], int]:
    unpack = struct.Struct(("<" if order == "little" else ">") + _INT[size]).unpack_from
    return lambda head: unpack(head, offset)[0]


def namer(fmt: MessageFormat) -> tuple[int, Callable[[bytes], str]]:
    """(bytes a name needs, the name of a message's first bytes) for a declarative format:
    its type field, or its classifier given at most `peek` bytes."""
    if fmt.type is not None:
        t: TypeField = fmt.type
        end, read, names, default = t.offset + t.size, _field(t.offset, t.size, t.order), dict(t.names), t.default
        return end, lambda head: names.get(read(head), default) if len(head) >= end else default
    classify, peek = resolve_reference(fmt.classifier), fmt.peek

    def classified(head: bytes) -> str:
        try:
            name = classify(head[:peek])
        except Exception:  # the SUT's classifier must not take the observer down
            return UNCLASSIFIED
        return name if isinstance(name, str) and is_message_name(name) else UNCLASSIFIED

    return peek, classified


class LengthCutter:
    """A `Cutter` for a declared length field, named by `name` (see `namer`)."""

    def __init__(self, length: LengthField, need: int, name: Callable[[bytes], str]) -> None:
        self.end = length.offset + length.size
        self.read = _field(length.offset, length.size, length.order)
        self.header = length.header if length.counts == "body" else 0
        self.max_length = length.max_length
        self.need, self.name = need, name
        self.peek = max(self.end, need)

    def cut(self, head: bytes, first: bool) -> tuple[int, str] | int | None:
        if len(head) < self.end:
            return self.end
        length = self.header + self.read(head)
        if length > self.max_length or length < self.end:
            return None
        need = min(self.need, length)
        if len(head) < need:
            return need
        return length, self.name(head[:need])


class Flow:
    """One direction of one TCP connection: `feed` each segment in arrival order.

    Subclasses frame the in-order bytes (`_consume`) and say whether a gap can be skipped.
    """

    def __init__(self) -> None:
        self.expect: int | None = None  # stream offset of the next in-order byte
        self.synced = False
        self.first = False  # the next message is the stream's first
        self.write_start = False  # the next in-order byte starts a TCP write
        self.pending: dict[int, tuple[bytes, bool]] = {}
        self.pending_bytes = 0
        self.recent: deque[tuple[int, str]] = deque()  # (attributed offset, name), oldest first
        self.covered: int | None = None  # `recent` holds every name from this offset on
        self.last_ns = 0

    def feed(self, seq: int, payload: bytes, syn: bool = False, push: bool = False) -> list[str] | None:
        """The names of the messages this segment starts (see the module docstring), or
        None when that cannot be told here."""
        if syn:
            self._restart((seq + 1) & _MASK)
            seq = (seq + 1) & _MASK
        if not payload:  # a bare ACK (or SYN) frames nothing, and is no message start to guess
            return []
        if self.expect is None:  # met mid-stream: try its first segment as a message start
            self.expect, self.write_start = seq, True
        expect = self.expect
        start = expect + ((seq - expect + _HALF) & _MASK) - _HALF
        end = start + len(payload)
        if end <= expect:
            return self._recalled(start, end)
        if start < expect:
            old = self._recalled(start, expect)
            new = self._in_order(payload[expect - start:], push)
            self._drain()
            return None if old is None or new is None else old + new
        if start == expect:
            names = self._in_order(payload, push)
            self._drain()
            return names
        if not self.pending and self._skip(start - expect):
            self.expect, self.write_start = start, False
            return self._in_order(payload, push)
        if len(self.pending) < MAX_PENDING and self.pending_bytes + len(payload) <= MAX_PENDING_BYTES:
            if start not in self.pending:
                self.pending[start] = (payload, push)
                self.pending_bytes += len(payload)
            return None
        self.lose_sync()  # the gap does not fill: give it up
        self.expect, self.write_start = start, False
        self._in_order(payload, push)
        return None

    def lose_sync(self) -> None:
        self.synced = self.first = False
        self.pending.clear()
        self.pending_bytes = 0
        self.recent.clear()
        self.covered = None
        self._reset()

    def skip_unseen(self, count: int) -> None:
        """`count` bytes after the last segment fed were not captured: sync is lost."""
        if self.expect is not None:
            self.lose_sync()
            self.expect += count
            self.write_start = False

    def _restart(self, seq: int) -> None:
        self.lose_sync()
        self.expect = self.covered = seq
        self.synced = self.first = self.write_start = True

    def _in_order(self, data: bytes, push: bool) -> list[str] | None:
        pos = self.expect
        assert pos is not None
        names = self._consume(pos, data, self.write_start)
        self.expect = pos + len(data)
        self.write_start = push
        return names

    def _drain(self) -> None:
        """Frame the held segments the stream has reached (their packets' data is gone)."""
        for start in sorted(self.pending):
            assert self.expect is not None
            if start > self.expect or start not in self.pending:  # not reached, or sync lost
                return
            data, push = self.pending.pop(start)
            self.pending_bytes -= len(data)
            if start + len(data) > self.expect:
                self._in_order(data[self.expect - start:], push)

    def _remember(self, pos: int, name: str) -> None:
        if len(self.recent) == RECENT:
            self.covered = self.recent.popleft()[0] + 1
        self.recent.append((pos, name))

    def _recalled(self, start: int, end: int) -> list[str] | None:
        if self.covered is None or start < self.covered:
            return None
        return [name for pos, name in self.recent if start <= pos < end]

    def _resynced(self, pos: int) -> None:
        self.synced, self.first, self.covered = True, False, pos

    # -- what a framing says --------------------------------------------------------------

    def _consume(self, pos: int, data: bytes, write_start: bool) -> list[str] | None:
        """Frame `data`, the in-order bytes from stream offset `pos`: the names attributed
        to it, None when out of sync."""
        raise NotImplementedError

    def _skip(self, gap: int) -> bool:
        """Step over the next `gap` bytes unseen if certainly no name is due in them."""
        return False

    def _reset(self) -> None:
        """Forget any message in progress."""


class LengthFlow(Flow):
    """A flow cut by a `Cutter`."""

    def __init__(self, cutter: Cutter) -> None:
        super().__init__()
        self.cutter = cutter
        self.skip = 0  # bytes left of the current message
        self.head = b""  # its first bytes, when they span packets
        self.need = 0  # bytes the cutter asked for

    def _reset(self) -> None:
        self.skip, self.head, self.need = 0, b"", 0

    def _skip(self, gap: int) -> bool:
        if not self.synced or self.head or self.skip < gap:
            return False
        self.skip -= gap
        return True

    def _consume(self, pos: int, data: bytes, write_start: bool) -> list[str] | None:
        guess = not self.synced  # a message is assumed to start here until one is cut
        if guess:
            if not write_start:
                return None
            self._resynced(pos)
            self._reset()
        names: list[str] = []
        cut, peek = self.cutter.cut, self.cutter.peek
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                if self.skip >= n - i:
                    self.skip -= n - i
                    break
                i += self.skip
                self.skip = 0
            prefix = self.head  # the message's bytes from earlier packets
            base = i - len(prefix)  # where the message starts in data (negative: earlier)
            while True:
                head = prefix + data[i : base + max(self.need, peek)]
                if len(head) < self.need:
                    self.head = head
                    return names if names or not guess else None
                try:
                    answer = cut(head, self.first)
                except Exception:  # a framer's bug must not take the observer down: lost sync
                    answer = None
                if type(answer) is int and len(head) < answer <= MAX_HEAD:
                    self.need = answer
                    continue
                break
            if type(answer) is not tuple or answer[0] < max(1, len(prefix)):
                self.lose_sync()
                return None
            length, name = answer
            attributed = pos + base + max(self.need, 1) - 1
            self._remember(attributed, name)
            names.append(name)
            self.head, self.need, self.first = b"", 0, False
            if base + length <= n:
                i = base + length
            else:
                self.skip = base + length - n
                i = n
        return names


class DelimitedFlow(Flow):
    """A flow whose messages each end with `delimiter`, named by `name` from at most
    `need` first bytes (a message that ends sooner is named from what it holds)."""

    def __init__(self, delimiter: bytes, need: int, name: Callable[[bytes], str]) -> None:
        super().__init__()
        self.delimiter, self.need, self.name = delimiter, need, name
        self.head = b""  # the current message's first bytes, until it is named
        self.named = False
        self.tail = b""  # the stream's last bytes that may begin a delimiter

    def _reset(self) -> None:
        self.head, self.named, self.tail = b"", False, b""

    def _consume(self, pos: int, data: bytes, write_start: bool) -> list[str] | None:
        delimiter, width = self.delimiter, len(self.delimiter)
        off = len(self.tail)
        buf = self.tail + data if off else data  # data[k] is buf[k + off]
        names: list[str] = []
        i, n, last_match = 0, len(data), 0
        synced_before = self.synced
        if not self.synced:
            j = buf.find(delimiter)
            if j < 0:
                self.tail = buf[max(0, len(buf) - width + 1):] if width > 1 else b""
                return None
            i = last_match = j + width
            i -= off
            self._resynced(pos + i)
            self.head, self.named = b"", False
        while i < n:
            j = buf.find(delimiter, last_match)  # a delimiter may begin in the tail
            end = n if j < 0 else j - off  # where the message's content ends in data
            if not self.named:
                take = data[i : max(i, min(end, i + self.need - len(self.head)))]
                self.head += take
                if len(self.head) >= self.need or (j >= 0 and self.head):
                    last = i + len(take) - 1 if len(self.head) >= self.need else j - off + width - 1
                    name = self.name(self.head)
                    self._remember(pos + last, name)
                    names.append(name)
                    self.named = True
            if j < 0:
                break
            i = j - off + width
            last_match = j + width
            self.head, self.named, self.first = b"", False, False
        if width > 1:
            self.tail = buf[max(last_match, len(buf) - width + 1):]
        return names if names or synced_before else None


class Piece(NamedTuple):
    """A run of one stream's bytes: a whole message named `name`, or (`name` None) bytes
    that make no message (after the stream lost sync, or cut short by its end); `offset`
    is where it starts in the stream (0: the stream's first byte)."""

    offset: int
    data: bytes
    name: str | None


class MessageStream:
    """One direction of one connection, read whole from its first byte: `feed` it the bytes
    as they come and it gives the pieces they complete (see the module docstring). A
    message is kept until its last byte arrives, up to the format's bound on a message
    (`max_length`; for a Python framer or a delimiter, DEFAULT_MAX_LENGTH); a longer one, a
    length that is not credible or a framer that says None or raises loses sync: from then
    on every byte fed comes straight back as an unnamed piece."""

    def __init__(self, cutter: Cutter | None, delimiter: bytes = b"", need: int = 0,
                 name: Callable[[bytes], str] | None = None, max_length: int = DEFAULT_MAX_LENGTH) -> None:
        self.cutter, self.delimiter, self.need, self.name, self.max_length = cutter, delimiter, need, name, max_length
        self.synced = True
        self.offset = 0  # of the first byte not yet given out
        self._buf = b""
        self._first = True  # the next message is the stream's first
        self._asked = 0  # bytes the cutter asked for
        self._cut_name = ""  # the name the cutter gave the message it cut last

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces `data` completes, in stream order."""
        if not self.synced:
            return self._give(data, None, []) if data else []
        buf = self._buf + data if self._buf else data
        pieces: list[Piece] = []
        pos = 0
        while pos < len(buf):
            length = self._cut(buf, pos) if self.cutter is not None else self._line(buf, pos)
            if length is None:  # lost sync: the rest goes on unframed
                self.synced = False
                self._buf = b""
                return self._give(buf[pos:], None, pieces)
            if length == 0 or pos + length > len(buf):
                break
            message = buf[pos : pos + length]
            name = self._named(message)
            self._give(message, name, pieces)
            pos += length
            self._first, self._asked = False, 0
        self._buf = buf[pos:]
        if len(self._buf) > self.max_length:
            self.synced = False
            rest, self._buf = self._buf, b""
            self._give(rest, None, pieces)
        return pieces

    def flush(self) -> list[Piece]:
        """At the stream's end: what is left of an unfinished message, as an unnamed piece."""
        rest, self._buf = self._buf, b""
        return self._give(rest, None, []) if rest else []

    def _give(self, data: bytes, name: str | None, pieces: list[Piece]) -> list[Piece]:
        pieces.append(Piece(self.offset, data, name))
        self.offset += len(data)
        return pieces

    def _cut(self, buf: bytes, pos: int) -> int | None:
        """The length of the message at `pos` (0: more bytes needed), None if it is none."""
        cutter = self.cutter
        assert cutter is not None
        while True:
            head = buf[pos : pos + max(self._asked, cutter.peek)]
            if len(head) < self._asked:
                return 0
            try:
                answer = cutter.cut(head, self._first)
            except Exception:  # the SUT's framer must not take the gateway down: lost sync
                return None
            if type(answer) is int:
                if not len(head) < answer <= MAX_HEAD:
                    return None
                self._asked = answer
                continue
            if type(answer) is not tuple or not 1 <= answer[0] <= self.max_length:
                return None
            self._cut_name = answer[1]
            return answer[0]

    def _line(self, buf: bytes, pos: int) -> int:
        end = buf.find(self.delimiter, pos)
        return 0 if end < 0 else end + len(self.delimiter) - pos

    def _named(self, message: bytes) -> str:
        if self.cutter is not None:
            return self._cut_name
        assert self.name is not None
        return self.name(message[: self.need])


def stream_factory(fmt: MessageFormat) -> Callable[[], MessageStream]:
    """What makes a new `MessageStream` of `fmt` (its framer and classifier imported now):
    one per direction of a connection read whole (the gateway's `Relay`,
    mallory/mediator/proxy.py). A stream keeps each message until its last byte arrives,
    so it is given the length field's `max` as its bound (DEFAULT_MAX_LENGTH otherwise).

    `flow_factory` makes the same choice of framing (framer, length field or delimiter)
    for captured packets. A helper could make it once for both, but each would still
    branch on its answer to build its own objects, and this one would read the bound
    back from the format: no shorter, and less direct to read."""
    if fmt.framer:
        framer: Cutter = resolve_reference(fmt.framer)
        return lambda: MessageStream(framer)
    need, name = namer(fmt)
    if fmt.length is not None:
        cutter = LengthCutter(fmt.length, need, name)
        bound = fmt.length.max_length
        return lambda: MessageStream(cutter, max_length=bound)
    return lambda: MessageStream(None, fmt.delimiter, need, name)


def flow_factory(fmt: MessageFormat) -> Callable[[], Flow]:
    """What makes a new `Flow` of `fmt` (its framer and classifier imported now): one per
    direction of a TCP connection seen packet by packet (`MessageSplitter`, the
    observer's). A flow keeps at most a message's first bytes (MAX_HEAD) and skips the
    rest, so it takes no bound beyond the length field's `max` its `LengthCutter` checks.
    `stream_factory` is its counterpart for streams read whole."""
    if fmt.framer:
        cutter: Cutter = resolve_reference(fmt.framer)
        return lambda: LengthFlow(cutter)
    need, name = namer(fmt)
    if fmt.length is not None:
        length_cutter = LengthCutter(fmt.length, need, name)
        return lambda: LengthFlow(length_cutter)
    return lambda: DelimitedFlow(fmt.delimiter, need, name)


class MessageSplitter:
    """Every flow of one node's declared TCP ports: `data` is a packet's event data."""

    def __init__(self, declared: PeerMessages, max_flows: int = MAX_FLOWS, idle_ns: int = IDLE_NS) -> None:
        self.ports = frozenset(declared.ports)
        self.new_flow = flow_factory(declared.format)
        self.flows: dict[bytes, Flow] = {}
        self.max_flows, self.idle_ns = max_flows, idle_ns
        self._next_sweep = 0

    def data(self, buf: bytes, ts: int) -> str | None:
        """The event data of a raw IPv4 packet (complete TCP header, as `id_and_data`
        accepted it) on a declared TCP flow; None for any other packet."""
        if buf[9] != 6:
            return None
        ihl = (buf[0] & 0x0F) * 4
        sport, dport = _PORTS.unpack_from(buf, ihl)
        ports = self.ports
        if sport not in ports and dport not in ports:
            return None
        flags = buf[ihl + 13]
        total = _U16.unpack_from(buf, 2)[0]
        end = min(total, len(buf))
        payload = buf[ihl + (buf[ihl + 12] >> 4) * 4 : end]
        key = buf[12:20] + buf[ihl : ihl + 4]
        flows = self.flows
        if not payload and not flags & _SYN:
            if flags & (_FIN | _RST):
                flows.pop(key, None)
            return ""
        flow = flows.get(key)
        if flow is None:
            if ts >= self._next_sweep or len(flows) >= self.max_flows:
                self._sweep(ts)
            flow = flows[key] = self.new_flow()
        flow.last_ns = ts
        names = flow.feed(_U32.unpack_from(buf, ihl + 4)[0], payload, bool(flags & _SYN), bool(flags & _PSH))
        if total > end:
            flow.skip_unseen(total - end)
        if flags & (_FIN | _RST):
            del flows[key]
        if not payload:
            return ""
        return UNKNOWN_MESSAGE if names is None else message_data(names)

    def _sweep(self, now: int) -> None:
        """Forget idle flows, and the oldest when the table is still full."""
        self._next_sweep = now + self.idle_ns // 4
        flows = self.flows
        for key in [k for k, f in flows.items() if now - f.last_ns > self.idle_ns]:
            del flows[key]
        while len(flows) >= self.max_flows:
            del flows[next(iter(flows))]
