"""The mediator's NFQUEUE on FORWARD: whole packets in, per-packet or batch verdicts out.

Same technique as the observer's reader (mallory/observer/nfq.py, whose queue binding it
shares): ctypes for setup and verdicts, packet messages parsed straight off the
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

import struct

from mallory.observer.nfq import (
    _NLATTR,
    _NLMSGHDR,
    NF_ACCEPT,
    NFQA_PACKET_HDR,
    NFQA_PAYLOAD,
    NFQNL_MSG_PACKET,
    QueueBinding,
)

NF_DROP = 0
COPY_RANGE = 0xFFFF  # whole packets: a duplicate is re-sent from the copy

_PACKET_ID = struct.Struct("!I")


class ForwardQueue:
    def __init__(self, queue_num: int, *, maxlen: int = 8192, rcvbuf: int = 16 << 20, fail_open: bool = True) -> None:
        self.queue_num = queue_num
        self.bypassed = 0
        self.received = 0
        self._last_id = 0
        self._bound = QueueBinding(queue_num, copy_range=COPY_RANGE, maxlen=maxlen, rcvbuf=rcvbuf,
                                   fail_open=fail_open, owner="mediator")
        self._buf = bytearray(1 << 17)
        self._view = memoryview(self._buf)
        self._queue = self._bound.queue
        self._verdict = self._bound.lib.nfq_set_verdict
        self._verdict_batch = self._bound.lib.nfq_set_verdict_batch

    def fileno(self) -> int:
        return self._bound.sock.fileno()

    def read(self, limit: int = 64, hooks: list[int] | None = None) -> list[tuple[int, bytes]]:
        """Up to `limit` queued packets as (packet id, IPv4 bytes), without blocking; with
        `hooks`, each packet's netfilter hook is appended to it (NF_INET_LOCAL_IN, ...:
        the message layer's capture queues two hooks on one queue)."""
        out: list[tuple[int, bytes]] = []
        buf, view, recv_into = self._buf, self._view, self._bound.recv_into
        unpack_msg, unpack_attr, unpack_id = _NLMSGHDR.unpack_from, _NLATTR.unpack_from, _PACKET_ID.unpack_from
        while len(out) < limit:
            n = recv_into(buf)
            if not n:
                break
            off = 0
            while off + 16 <= n:
                msg_len, msg_type, _flags, _seq, _pid = unpack_msg(buf, off)
                if msg_len < 16:
                    break
                end = off + msg_len
                if msg_type == NFQNL_MSG_PACKET:
                    packet_id = hook = -1
                    payload = b""
                    a = off + 20  # nlmsghdr + nfgenmsg
                    while a + 4 <= end:
                        a_len, a_type = unpack_attr(buf, a)
                        if a_len < 4:
                            break
                        a_type &= 0x3FFF
                        if a_type == NFQA_PACKET_HDR:
                            packet_id = unpack_id(buf, a + 4)[0]
                            hook = buf[a + 10]
                        elif a_type == NFQA_PAYLOAD:
                            payload = bytes(view[a + 4 : a + a_len])
                        a += (a_len + 3) & ~3
                    if packet_id >= 0:
                        if self._last_id and packet_id > self._last_id + 1:
                            self.bypassed += packet_id - self._last_id - 1
                        self._last_id = packet_id
                        out.append((packet_id, payload))
                        if hooks is not None:
                            hooks.append(hook)
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
        self._bound.close()
