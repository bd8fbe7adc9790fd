"""The timeline's SEND -> RECV arrows across the message layer (issue 19, part 2): both TCP
legs of every proxied connection captured at the gateway, and the receiver's packets
relinked to the sender's.

Observers name packets by packet id (mallory/observer/packet.py) and the timeline joins a
SEND to the RECV with the same id. Behind the proxy (mallory/mediator/proxy.py) a message
crosses two connections with one 4-tuple but their own sequence numbers and IP ids: the
sender's observer sees leg 1's segments, the receiver's observer leg 2's, and no id is on
both. The join moves to the gateway, which knows which bytes of leg 2 came from which bytes
of leg 1:

* `LegCapture` reads the diverted connections' packets from an NFQUEUE of their own on the
  gateway's INPUT and OUTPUT (mallory/mediator/divert.py installs the rules): a direction's
  incoming leg arrives at INPUT, its outgoing leg leaves through OUTPUT, both with the
  direction's original 4-tuple. `LegJoin` keeps, per direction, each leg's initial
  sequence number and the incoming leg's recent data segments (stream range -> packet id);
* the proxy tells `LegJoin.written` where each run of bytes it writes sits in the outgoing
  stream and where it was read in the incoming one;
* so when an outgoing data packet passes, its first byte's outgoing offset gives the
  incoming offset it was read at, hence the incoming segment that carried it: the outgoing
  packet's id is relinked to that segment's id. The ingest (mallory/mediator/ingest.py)
  gives a RECV event the id `relink` answers before the timeline sees it, so the receiver's
  RECV joins the sender's SEND itself: the arrow goes n1 -> n2, as without the layer, with
  the observers' message types on it, and no gateway lane is put between the nodes.

It is race-free: NFQUEUE holds the outgoing packet until it is relinked, so the relink
exists before the packet reaches the receiver's observer. Per outgoing packet, the link is
its first byte's: a packet of two messages joins the first one's segment. A dropped message
leaves its SEND without a RECV (as a dropped packet does), a duplicated one gives it two, a
delayed one a later one. The packets the gateway makes itself on the legs it owns (its
ACKs, handshakes, FINs and RSTs: no SUT bytes) were sent by no node, so `relink` answers
`NO_SEND` for them and the ingest leaves their RECVs out: each would otherwise hold its
node's stream in the timeline until every other stream had passed it by the skew bound,
the wait for a SEND that never comes. A node's SENDs of such packets (its ACKs to the
gateway) simply have no RECV. A sequence
number gives a stream offset modulo 2^32; it is unwrapped next to the direction's latest
offsets (the highest incoming one seen, the end of what the proxy has written), so joins
stay exact past 4 GiB. Incoming segments are kept in stream order whatever order they
arrive in (a retransmission, a segment overtaken): a retransmission of a segment already
seen leaves the first copy's id, which the proxy read the bytes from.

The capture also applies the firewall's link rules (mallory/mediator/rules.py), which the
diverted packets no longer meet (they do not cross FORWARD, where the firewall sits): a
drop rule drops the link's packets on both legs (a partition must still cut a peer
connection: its SYN, its data, its ACKs); a delay rule holds the link's packets arriving
on their incoming leg (the sender's data and ACKs, as the firewall would hold them; the
gateway's own packets are not held again), in order, `delay_ns` each. Duplicate rules do
not reach proxied connections (a duplicated segment is discarded by the gateway's TCP, as
it would be by the receiver's: nothing the SUT would see). Packet ids of both legs go into
the firewall's `SeenPackets`, which the ingest's join statistics read.
"""

from __future__ import annotations

import bisect
import heapq
import os
import select
import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping

from mallory.mediator.firewall import SeenPackets
from mallory.mediator.ingest import NO_SEND
from mallory.mediator.proxy import Key
from mallory.mediator.queue import ForwardQueue
from mallory.mediator.rules import LinkRule
from mallory.observer.nfq import NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT
from mallory.observer.packet import TCP, id_of, ip_int

#: incoming segments kept per direction (a relink looks among them)
MAX_SEGMENTS = 4096
#: written spans kept per direction
MAX_SPANS = 4096
#: directions remembered (the oldest go first)
MAX_DIRECTIONS = 4096
#: relinks kept for the ingest (a receiver's batch comes within a second or so)
MAX_RELINKS = 200_000
#: LegCapture's verdicts other than a delay (ns, > 0)
ACCEPT = 0
DROP = -1

_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_SYN = 0x02
_HEADER = struct.Struct("!BxH5xBxxII")  # version/ihl, total length, protocol, source, destination
_TCP = struct.Struct("!HHI")  # ports, sequence number


class _Direction:
    """What is known of one direction of a proxied connection (offsets unwrapped: see the
    module docstring)."""

    __slots__ = ("in_isn", "out_isn", "in_top", "seg_starts", "seg_ids", "span_outs", "spans")

    def __init__(self) -> None:
        self.in_isn: int | None = None
        self.out_isn: int | None = None
        self.in_top = 0  # the highest incoming stream offset seen (the end of a segment)
        self.seg_starts: list[int] = []  # incoming data segments' first offsets, ascending
        self.seg_ids: list[tuple[int, int]] = []  # (end offset, packet id) of each
        self.span_outs: list[int] = []  # outgoing offsets of the spans written, ascending
        self.spans: list[tuple[int, int]] = []  # (incoming offset, length) of each

    def written_end(self) -> int:
        """The outgoing offset after the last span written (0 before any)."""
        return self.span_outs[-1] + self.spans[-1][1] if self.spans else 0


def _unwrap(offset32: int, near: int) -> int:
    """The offset congruent to `offset32` modulo 2^32 that is nearest to `near`."""
    return near + ((offset32 - near + _HALF) & _MASK) - _HALF


class LegJoin:
    """The relinks of the proxied connections (see the module docstring). `written` is
    called from the proxy's thread, `packet` from the capture's, `relink` from the
    ingest's: one lock keeps them apart."""

    def __init__(self) -> None:
        self._directions: OrderedDict[Key, _Direction] = OrderedDict()
        self._relinks: dict[int, int] = {}
        self._relink_order: deque[int] = deque()
        self._lock = threading.Lock()
        self.relinked = 0
        self.unjoined = 0  # outgoing data packets whose bytes' origin was not found

    def _direction(self, key: Key) -> _Direction:
        """`key`'s direction, made if new; the least recently used one goes when there are
        too many (a long-lived connection is not forgotten for others' churn)."""
        found = self._directions.get(key)
        if found is None:
            found = self._directions[key] = _Direction()
            if len(self._directions) > MAX_DIRECTIONS:
                self._directions.popitem(last=False)
        else:
            self._directions.move_to_end(key)
        return found

    def written(self, key: Key, out_offset: int, in_offset: int, length: int) -> None:
        """The proxy wrote `length` bytes read at `in_offset` of direction `key`'s incoming
        stream at `out_offset` of its outgoing one (offsets from 0, not wrapped)."""
        with self._lock:
            d = self._direction(key)
            if out_offset == 0:  # a new connection's first write (its SYN may not be seen yet)
                d.span_outs, d.spans = [], []
            d.span_outs.append(out_offset)
            d.spans.append((in_offset, length))
            if len(d.spans) > 2 * MAX_SPANS:
                del d.span_outs[:MAX_SPANS], d.spans[:MAX_SPANS]

    def packet(self, incoming: bool, key: Key, seq: int, flags: int, length: int, packet_id: int) -> None:
        """A TCP packet of direction `key` on its incoming (INPUT) or outgoing (OUTPUT) leg,
        `length` its payload bytes."""
        with self._lock:
            d = self._direction(key)
            if not incoming and (flags & _SYN or not length):
                self._keep(packet_id, NO_SEND)  # the gateway's own: its RECV waits for no SEND
            if flags & _SYN:  # a new connection on this 4-tuple starts this leg afresh
                if incoming:
                    d.in_isn, d.in_top, d.seg_starts, d.seg_ids = seq, 0, [], []
                else:
                    d.out_isn = seq
                return
            if not length:
                return
            if incoming:
                if d.in_isn is None:
                    return
                start = _unwrap((seq - d.in_isn - 1) & _MASK, d.in_top)
                if start < 0:
                    return
                d.in_top = max(d.in_top, start + length)
                i = bisect.bisect_right(d.seg_starts, start)
                if i and d.seg_starts[i - 1] == start:
                    return  # a retransmission: the first copy keeps its place
                d.seg_starts.insert(i, start)
                d.seg_ids.insert(i, (start + length, packet_id))
                if len(d.seg_ids) > 2 * MAX_SEGMENTS:
                    del d.seg_starts[:MAX_SEGMENTS], d.seg_ids[:MAX_SEGMENTS]
                return
            origin = self._origin(d, seq)
            if origin is None:
                self.unjoined += 1
                return
            self._keep(packet_id, origin)
            self.relinked += 1

    def _keep(self, packet_id: int, answer: int) -> None:
        """`relink`'s answer for `packet_id` (the oldest go past MAX_RELINKS)."""
        self._relinks[packet_id] = answer
        self._relink_order.append(packet_id)
        if len(self._relink_order) > MAX_RELINKS:
            self._relinks.pop(self._relink_order.popleft(), None)

    @staticmethod
    def _origin(d: _Direction, seq: int) -> int | None:
        """The packet id of the incoming segment that carried the outgoing byte at `seq`."""
        if d.out_isn is None:
            return None
        out = _unwrap((seq - d.out_isn - 1) & _MASK, d.written_end())
        i = bisect.bisect_right(d.span_outs, out) - 1
        if i < 0:
            return None
        in_start, length = d.spans[i]
        if out - d.span_outs[i] >= length:
            return None
        at = in_start + out - d.span_outs[i]
        j = bisect.bisect_right(d.seg_starts, at) - 1
        if j < 0:
            return None
        end, packet_id = d.seg_ids[j]
        return packet_id if at < end else None

    def relink(self, packet_id: int) -> int | None:
        """The id a RECV of outgoing packet `packet_id` joins with; NO_SEND for a packet the
        gateway made itself; None when it is not one of the layer's."""
        return self._relinks.get(packet_id)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"relinked": self.relinked, "unjoined": self.unjoined, "directions": len(self._directions)}


def tcp_fields(buf: bytes) -> tuple[Key, int, int, int] | None:
    """(4-tuple, sequence number, flags, payload length) of an IPv4 TCP packet, None for
    anything else."""
    if len(buf) < 20:
        return None
    ver_ihl, total, proto, src, dst = _HEADER.unpack_from(buf)
    ihl = (ver_ihl & 0x0F) * 4
    if ver_ihl >> 4 != 4 or proto != TCP or len(buf) < ihl + 20:
        return None
    sport, dport, seq = _TCP.unpack_from(buf, ihl)
    payload = min(total, len(buf)) - ihl - (buf[ihl + 12] >> 4) * 4
    return (src, sport, dst, dport), seq, buf[ihl + 13], max(0, payload)


class LegCapture:
    """The capture queue's thread (see the module docstring): every packet of the proxied
    connections at INPUT and OUTPUT is joined (`LegJoin.packet`), counted in `seen`, and
    accepted, dropped when the firewall's rule for its link drops, or held when it delays
    (`counts`: "dropped", "delayed")."""

    def __init__(self, join: LegJoin, node_addresses: Mapping[str, str], rules: Callable[[], Mapping[tuple[str, str], LinkRule]],
                 seen: SeenPackets) -> None:
        self.join = join
        self.node_by_ip = {ip_int(address): node for node, address in node_addresses.items()}
        self.rules = rules
        self.seen = seen
        self.counts = {"packets": 0, "dropped": 0, "delayed": 0, "errors": 0}
        self._held: list[tuple[int, int, int]] = []  # (due ns, order, queue id), a heap
        self._order = 0
        self._wake_r, self._wake_w = os.pipe()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def verdicts(self, packets: list[tuple[int, bytes]], hooks: list[int]) -> list[tuple[int, int]]:
        """(queue id, verdict) for each packet, after joining it: ACCEPT, DROP, or a delay in
        ns to hold it for."""
        out = []
        rules = self.rules()
        for (queue_id, buf), hook in zip(packets, hooks):
            self.counts["packets"] += 1
            fields = tcp_fields(buf)
            if fields is None:
                out.append((queue_id, ACCEPT))
                continue
            key, seq, flags, length = fields
            src, dst = self.node_by_ip.get(key[0]), self.node_by_ip.get(key[2])
            rule = rules.get((src, dst)) if rules and src and dst else None
            if rule is not None and rule.drop:
                self.counts["dropped"] += 1
                out.append((queue_id, DROP))
                continue
            packet_id = id_of(buf)
            if packet_id is not None:
                self.seen.add(packet_id)
                if hook in (NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT):
                    self.join.packet(hook == NF_INET_LOCAL_IN, key, seq, flags, length, packet_id)
            if rule is not None and rule.delay_ns > 0 and hook == NF_INET_LOCAL_IN:
                self.counts["delayed"] += 1
                out.append((queue_id, rule.delay_ns))
            else:
                out.append((queue_id, ACCEPT))
        return out

    def hold(self, queue_id: int, delay_ns: int, now: int) -> None:
        """Keep `queue_id` queued until `now + delay_ns` (`due` lets it go)."""
        self._order += 1
        heapq.heappush(self._held, (now + delay_ns, self._order, queue_id))

    def due(self, now: int) -> tuple[list[int], int | None]:
        """The held packets whose time has come (taken out), and the next one's due time."""
        held, ready = self._held, []
        while held and held[0][0] <= now:
            ready.append(heapq.heappop(held)[2])
        return ready, held[0][0] if held else None

    def start(self, queue_num: int, fail_open: bool = True) -> LegCapture:
        queue = ForwardQueue(queue_num, fail_open=fail_open)
        self._thread = threading.Thread(target=self._loop, args=(queue,), name="message-legs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(2.0)
        if self._thread is None or not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _loop(self, queue: ForwardQueue) -> None:
        fd = queue.fileno()
        try:
            next_due: int | None = None
            while not self._stop:
                timeout = 0.5 if next_due is None else min(0.5, max(0.0, (next_due - time.monotonic_ns()) / 1e9))
                select.select([fd, self._wake_r], [], [], timeout)
                while not self._stop:
                    hooks: list[int] = []
                    packets = queue.read(hooks=hooks)
                    if not packets:
                        break
                    try:
                        decided = self.verdicts(packets, hooks)
                    except Exception:  # never leave packets without a verdict
                        self.counts["errors"] += len(packets)
                        for queue_id, _ in packets:
                            queue.accept(queue_id)  # one by one: a held packet may be older
                        continue
                    now = time.monotonic_ns()
                    for queue_id, verdict in decided:
                        if verdict == ACCEPT:
                            queue.accept(queue_id)
                        elif verdict == DROP:
                            queue.drop(queue_id)
                        else:
                            self.hold(queue_id, verdict, now)
                ready, next_due = self.due(time.monotonic_ns())
                for queue_id in ready:
                    queue.accept(queue_id)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            try:
                for _, _, queue_id in self._held:  # let what is held go, not die with the queue
                    queue.accept(queue_id)
                self._held.clear()
            finally:
                queue.close()
