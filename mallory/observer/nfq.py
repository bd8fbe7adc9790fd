"""A passive NFQUEUE reader: libnetfilter_queue through ctypes for setup and verdicts, the
packet messages parsed straight off the netlink socket.

Why not PyPI netfilterqueue here: it does not expose the queue handle, and the observer
needs `nfq_set_queue_flags(NFQA_CFG_F_FAIL_OPEN)`: with it the kernel ACCEPTS a packet when
the queue is full or the message cannot be delivered, instead of dropping it, so a slow
observer never blackholes the SUT (a dead one is covered by the rules' --queue-bypass).

The hot path makes no per-packet ctypes call: `drain` reads every pending netlink message
(non-blocking recv_into), slices the packet header attribute (packet id, hook) and the
payload (only the first COPY_RANGE bytes are copied to us: headers plus 4 payload bytes
are all the observer keeps, unless it frames messages and asks for FULL_COPY), then issues ONE batch verdict (`nfq_set_verdict_batch`, accept
every packet id <= the last one read). The kernel numbers the packets it hands to the
socket consecutively, so a gap between two ids we read counts packets it let through after
failing to deliver them to us (socket overrun, fail-open): they are reported as `lost`.
Packets let through because the queue itself was full get no id and cannot be counted; the
queue is long (maxlen, 16384 from `mallory observe`) and drained in batches, so that takes
a stalled observer. The flip side of a long queue: a STOPPED (SIGSTOP) observer holds up
to maxlen packets before fail-open lets the rest by, which a low-rate SUT feels as a stall
(a dead observer is no problem: --queue-bypass).
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct
import time
from typing import Callable

from mallory.errors import MalloryError

NF_ACCEPT = 1
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_PACKET_HDR = 1
NFQA_PAYLOAD = 10
NFQNL_MSG_PACKET = (3 << 8) | 0  # NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET
NLMSG_ERROR = 2
NF_INET_LOCAL_IN = 1
NF_INET_LOCAL_OUT = 3
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33

#: IPv4 header (<= 60) + TCP header (<= 60) + 4 payload bytes fit in 128.
COPY_RANGE = 128
#: Whole packets: what framing a stream into messages needs (mallory/observer/framing.py).
FULL_COPY = 0xFFFF

_NLMSGHDR = struct.Struct("=IHHII")
_HDR_ATTR = (4 + 7, NFQA_PACKET_HDR)  # (nla_len, nla_type) of the packed 7-byte header
_PAYLOAD_ATTR_LEN = 4 + COPY_RANGE
_FULL_PAYLOAD_ATTR = (_PAYLOAD_ATTR_LEN, NFQA_PAYLOAD)
_NLATTR = struct.Struct("=HH")
_PACKET_HDR = struct.Struct("!IHB")

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class _PacketHdr(ctypes.BigEndianStructure):
    _pack_ = 1
    _fields_ = [("packet_id", ctypes.c_uint32), ("hw_protocol", ctypes.c_uint16), ("hook", ctypes.c_uint8)]


def _load_library() -> ctypes.CDLL:
    # By soname, the ABI bound below: ctypes.util.find_library would run ldconfig in a
    # subprocess to find the same file, and its imports cost every observer 0.8 MB.
    try:
        lib = ctypes.CDLL("libnetfilter_queue.so.1", use_errno=True)
    except OSError as exc:
        raise MalloryError(f"libnetfilter_queue not found ({exc}); install the Debian package libnetfilter-queue1") from None
    vp, u32 = ctypes.c_void_p, ctypes.c_uint32
    for name, restype, argtypes in [
        ("nfq_open", vp, []),
        ("nfq_close", ctypes.c_int, [vp]),
        ("nfq_create_queue", vp, [vp, ctypes.c_uint16, _CALLBACK, vp]),
        ("nfq_destroy_queue", ctypes.c_int, [vp]),
        ("nfq_set_mode", ctypes.c_int, [vp, ctypes.c_uint8, u32]),
        ("nfq_set_queue_maxlen", ctypes.c_int, [vp, u32]),
        ("nfq_set_queue_flags", ctypes.c_int, [vp, u32, u32]),
        ("nfq_fd", ctypes.c_int, [vp]),
        ("nfq_set_verdict", ctypes.c_int, [vp, u32, u32, u32, vp]),
        ("nfq_set_verdict_batch", ctypes.c_int, [vp, u32, u32]),
        ("nfq_get_msg_packet_hdr", ctypes.POINTER(_PacketHdr), [vp]),
    ]:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def parse_datagram(buf: bytearray, view: memoryview, n: int, ts: int, out: list) -> None:
    """Append (packet id, hook, ts, payload) for every queued-packet message in the first n
    bytes of a netlink datagram (other messages are skipped)."""
    unpack_msg, unpack_attr, unpack_hdr = _NLMSGHDR.unpack_from, _NLATTR.unpack_from, _PACKET_HDR.unpack_from
    off = 0
    while off + 16 <= n:
        msg_len, msg_type, _flags, _seq, _pid = unpack_msg(buf, off)
        if msg_len < 16 or off + msg_len > n:
            return
        end = off + msg_len
        if msg_type == NFQNL_MSG_PACKET:
            packet_id = hook = -1
            payload = b""
            a = off + 20  # nlmsghdr + nfgenmsg
            # Fast path: the kernel writes the packet header attribute first and the
            # payload last, and a truncated payload is exactly COPY_RANGE long.
            tail = end - _PAYLOAD_ATTR_LEN
            if tail > a and unpack_attr(buf, a) == _HDR_ATTR and unpack_attr(buf, tail) == _FULL_PAYLOAD_ATTR:
                packet_id, _proto, hook = unpack_hdr(buf, a + 4)
                payload = bytes(view[tail + 4 : end])
                a = end
            while a + 4 <= end:
                a_len, a_type = unpack_attr(buf, a)
                if a_len < 4 or a + a_len > end:
                    break
                a_type &= 0x3FFF
                if a_type == NFQA_PACKET_HDR:
                    packet_id, _proto, hook = unpack_hdr(buf, a + 4)
                elif a_type == NFQA_PAYLOAD:
                    payload = bytes(view[a + 4 : a + a_len])
                a += (a_len + 3) & ~3
            if packet_id >= 0:
                out.append((packet_id, hook, ts, payload))
        off += (msg_len + 3) & ~3


class QueueBinding:
    """One NFQUEUE queue bound in the current network namespace: the library handle and
    queue (setup and verdicts through ctypes), fail-open, and a non-blocking socket over the
    library's fd for reading packet messages without ctypes. Shared by the observer's
    reader (below) and the mediator's FORWARD queue (mallory/mediator/queue.py)."""

    def __init__(self, queue_num: int, *, copy_range: int, maxlen: int, rcvbuf: int, fail_open: bool, owner: str) -> None:
        self.lib = _load_library()
        self.queue = None
        self.sock: socket.socket | None = None
        self._handle = self.lib.nfq_open()
        if not self._handle:
            raise MalloryError(f"nfq_open failed (errno {ctypes.get_errno()}): NFQUEUE needs root and nfnetlink_queue")
        # The library dispatches to this callback only while it waits for a config ack
        # (packets may already be queued if stale rules exist): accept them, one by one.
        self._callback = _CALLBACK(self._on_library_packet)
        self.queue = self.lib.nfq_create_queue(self._handle, queue_num, self._callback, None)
        if not self.queue:
            err = ctypes.get_errno()
            self.lib.nfq_close(self._handle)
            self._handle = None
            raise MalloryError(
                f"cannot bind NFQUEUE {queue_num} (errno {err}: {errno.errorcode.get(err, '?')}); is another {owner} bound?"
            )
        if self.lib.nfq_set_mode(self.queue, NFQNL_COPY_PACKET, copy_range) < 0:
            self.close()
            raise MalloryError("nfq_set_mode failed")
        self.lib.nfq_set_queue_maxlen(self.queue, maxlen)
        if fail_open and self.lib.nfq_set_queue_flags(self.queue, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN) < 0:
            self.close()
            raise MalloryError("nfq_set_queue_flags(FAIL_OPEN) failed: kernel too old?")
        # A socket object over a duplicate of the library's fd: recv_into without ctypes.
        self.sock = socket.socket(fileno=socket.dup(self.lib.nfq_fd(self._handle)))
        self.sock.setblocking(False)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        # Overruns are seen as id gaps; without this flag recv would fail with ENOBUFS.
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)

    def _on_library_packet(self, qh: int, _nfmsg: int, nfad: int, _data: int) -> int:
        hdr = self.lib.nfq_get_msg_packet_hdr(nfad)
        if hdr:
            self.lib.nfq_set_verdict(qh, hdr.contents.packet_id, NF_ACCEPT, 0, None)
        return 0

    def recv_into(self, buf: bytearray) -> int:
        """One netlink datagram into buf: its length, or 0 when nothing is pending."""
        while True:
            try:
                return self.sock.recv_into(buf)
            except BlockingIOError:
                return 0
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.queue:
            self.lib.nfq_destroy_queue(self.queue)
            self.queue = None
        if self._handle:
            self.lib.nfq_close(self._handle)
            self._handle = None


class NfQueue:
    """One bound NFQUEUE queue in the current network namespace, accepting everything."""

    def __init__(self, queue_num: int, *, maxlen: int = 4096, rcvbuf: int = 8 << 20, fail_open: bool = True,
                 copy_range: int = COPY_RANGE) -> None:
        """copy_range: how many bytes of each packet we read (FULL_COPY to frame messages;
        then the fast path of parse_datagram, for COPY_RANGE copies, is not taken)."""
        self.queue_num = queue_num
        self.lost = 0  # packets the kernel accepted without handing them to us
        self.received = 0
        self.reads = 0  # drains that found packets: received / reads = packets per wakeup
        self._last_id = 0
        self._bound = QueueBinding(queue_num, copy_range=copy_range, maxlen=maxlen, rcvbuf=rcvbuf,
                                   fail_open=fail_open, owner="observer")
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)

    def fileno(self) -> int:
        return self._bound.sock.fileno()

    def drain(self, on_packets: Callable[[list[tuple[int, int, int, bytes]]], None], limit: int = 1024) -> int:
        """Read every pending packet (up to `limit`), accept them all with one verdict, then
        hand them to on_packets as (packet id, hook, mono_ns, ip_bytes) tuples: the SUT's
        packets are on their way before we spend time on them. Returns how many were read."""
        got: list[tuple[int, int, int, bytes]] = []
        buf, view, recv_into = self._buf, self._view, self._bound.recv_into
        monotonic_ns = time.monotonic_ns
        while len(got) < limit:
            n = recv_into(buf)
            if not n:
                break
            parse_datagram(buf, view, n, monotonic_ns(), got)
        if not got:
            return 0
        last = self._last_id
        for packet_id, _hook, _ts, _payload in got:
            if last and packet_id > last + 1:
                self.lost += packet_id - last - 1
            last = packet_id
        self._last_id = last
        self._bound.lib.nfq_set_verdict_batch(self._bound.queue, last, NF_ACCEPT)
        on_packets(got)
        self.received += len(got)
        self.reads += bool(got)
        return len(got)

    def close(self) -> None:
        self._bound.close()
