"""The mediator's NFQUEUE on FORWARD: whole packets in, per-packet or batch verdicts out.

Same technique as the observer's reader (mallory/observer/nfq.py, whose libnetfilter_queue
bindings it shares): ctypes for setup and verdicts, packet messages parsed straight off the
netlink socket with recv_into. Unlike the observer, the mediator decides each packet, so:

* it copies whole packets (a duplicate is re-sent from the copy);
* `read` returns (packet id, bytes) and the caller gives verdicts: `accept_upto(id)` (one
  batch verdict for every queued packet with a smaller or equal id: the common case, one
  syscall for a whole drain), `accept(id)` / `drop(id)` for single packets;
* a held (delayed) packet stays queued until its `accept`, so the caller must not issue a
  batch verdict that covers it (see Firewall.process).

Fail-open (NFQA_CFG_F_FAIL_OPEN) is on by default: if the mediator falls behind and the
queue fills, the kernel lets packets through unfaulted instead of dropping them; id gaps
count them (`bypassed`). A dead mediator is covered by the rules' --queue-bypass.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct

from mallory.errors import MalloryError
from mallory.observer.nfq import (
    NETLINK_NO_ENOBUFS,
    NF_ACCEPT,
    NFQA_CFG_F_FAIL_OPEN,
    NFQA_PACKET_HDR,
    NFQA_PAYLOAD,
    NFQNL_COPY_PACKET,
    NFQNL_MSG_PACKET,
    SO_RCVBUFFORCE,
    SOL_NETLINK,
    _CALLBACK,
    _load_library,
)

NF_DROP = 0
COPY_RANGE = 0xFFFF

_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")
_PACKET_ID = struct.Struct("!I")


class ForwardQueue:
    def __init__(self, queue_num: int, *, maxlen: int = 8192, rcvbuf: int = 16 << 20, fail_open: bool = True) -> None:
        self.queue_num = queue_num
        self.bypassed = 0
        self.received = 0
        self._last_id = 0
        self._lib = _load_library()
        self._lib.nfq_set_verdict.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
        self._handle = self._lib.nfq_open()
        if not self._handle:
            raise MalloryError(f"nfq_open failed (errno {ctypes.get_errno()}): NFQUEUE needs root and nfnetlink_queue")
        # The library calls this only while it waits for a config ack (packets of stale
        # rules may already be queued): let them through.
        self._callback = _CALLBACK(self._on_library_packet)
        self._queue = self._lib.nfq_create_queue(self._handle, queue_num, self._callback, None)
        if not self._queue:
            err = ctypes.get_errno()
            self._lib.nfq_close(self._handle)
            raise MalloryError(f"cannot bind NFQUEUE {queue_num} (errno {err}: {errno.errorcode.get(err, '?')}); is another mediator running?")
        if self._lib.nfq_set_mode(self._queue, NFQNL_COPY_PACKET, COPY_RANGE) < 0:
            self.close()
            raise MalloryError("nfq_set_mode failed")
        self._lib.nfq_set_queue_maxlen(self._queue, maxlen)
        if fail_open and self._lib.nfq_set_queue_flags(self._queue, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN) < 0:
            self.close()
            raise MalloryError("nfq_set_queue_flags(FAIL_OPEN) failed")
        self._sock = socket.socket(fileno=socket.dup(self._lib.nfq_fd(self._handle)))
        self._sock.setblocking(False)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self._sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self._buf = bytearray(1 << 17)
        self._view = memoryview(self._buf)
        self._verdict = self._lib.nfq_set_verdict
        self._verdict_batch = self._lib.nfq_set_verdict_batch

    def _on_library_packet(self, qh: int, _nfmsg: int, nfad: int, _data: int) -> int:
        hdr = self._lib.nfq_get_msg_packet_hdr(nfad)
        if hdr:
            self._lib.nfq_set_verdict(qh, hdr.contents.packet_id, NF_ACCEPT, 0, None)
        return 0

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self, limit: int = 64) -> list[tuple[int, bytes]]:
        """Up to `limit` queued packets as (packet id, IPv4 bytes), without blocking."""
        out: list[tuple[int, bytes]] = []
        buf, view, recv_into = self._buf, self._view, self._sock.recv_into
        unpack_msg, unpack_attr, unpack_id = _NLMSGHDR.unpack_from, _NLATTR.unpack_from, _PACKET_ID.unpack_from
        while len(out) < limit:
            try:
                n = recv_into(buf)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    continue
                raise
            off = 0
            while off + 16 <= n:
                msg_len, msg_type, _flags, _seq, _pid = unpack_msg(buf, off)
                if msg_len < 16:
                    break
                end = off + msg_len
                if msg_type == NFQNL_MSG_PACKET:
                    packet_id = -1
                    payload = b""
                    a = off + 20  # nlmsghdr + nfgenmsg
                    while a + 4 <= end:
                        a_len, a_type = unpack_attr(buf, a)
                        if a_len < 4:
                            break
                        a_type &= 0x3FFF
                        if a_type == NFQA_PACKET_HDR:
                            packet_id = unpack_id(buf, a + 4)[0]
                        elif a_type == NFQA_PAYLOAD:
                            payload = bytes(view[a + 4 : a + a_len])
                        a += (a_len + 3) & ~3
                    if packet_id >= 0:
                        if self._last_id and packet_id > self._last_id + 1:
                            self.bypassed += packet_id - self._last_id - 1
                        self._last_id = packet_id
                        out.append((packet_id, payload))
                off += (msg_len + 3) & ~3
        self.received += len(out)
        return out

    def accept(self, packet_id: int) -> None:
        self._verdict(self._queue, packet_id, NF_ACCEPT, 0, None)

    def drop(self, packet_id: int) -> None:
        self._verdict(self._queue, packet_id, NF_DROP, 0, None)

    def accept_upto(self, packet_id: int) -> None:
        self._verdict_batch(self._queue, packet_id, NF_ACCEPT)

    def close(self) -> None:
        if getattr(self, "_sock", None) is not None:
            self._sock.close()
            self._sock = None
        if self._queue:
            self._lib.nfq_destroy_queue(self._queue)
            self._queue = None
        if self._handle:
            self._lib.nfq_close(self._handle)
            self._handle = None
