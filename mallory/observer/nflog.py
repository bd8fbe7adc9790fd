"""A passive NFLOG reader: the kernel hands us a COPY of each packet and never waits for us.

The observer needs no verdict, so NFLOG takes it off the SUT's data path altogether: no
round trip per packet as with NFQUEUE, and a dead, paused or slow observer cannot hold a
packet back (overload shows up as lost copies, never as a stalled SUT). The kernel may
batch copies (`threshold` packets per netlink datagram, flushed at least every `flush_cs`
hundredths of a second); the default threshold of 1 sends each copy at once, which keeps
read times close to hook times. Copies are truncated to COPY_RANGE bytes (headers + 4
payload bytes), or whole when the observer frames messages.

The price (bench/bench_cluster_overhead.py): the observer is not in the data path, so
nothing slows the SUT down to the observer's pace; under bulk traffic it loses copies
(counted), and a receiver's copy may be read before the sender's (no causal stamp order).
Worse for bulk TCP: the sender's OUTPUT hook sees software-GSO super-packets (up to 64 KB,
split into wire segments only later, at transmit), and NFLOG logs each once, so the
sender's SEND events do not match the segments the gateway and the receiver see (NFQUEUE
segments GSO packets before queueing them). That is why NFQUEUE is the observer's default
and NFLOG an option for low-overhead runs of SUTs that exchange small messages.

Pure Python over a NETLINK_NETFILTER socket (nfnetlink_log's message format, see
linux/netfilter/nfnetlink_log.h); no library. The instance is configured with
NFULNL_CFG_F_SEQ, so each copy carries the instance's sequence number and gaps count the
copies the kernel could not deliver (`lost`).

Timestamps: a packet's event is stamped when we read it, after it passed the hook by the
scheduling delay (plus up to `flush_cs` with a threshold > 1). Batches keep their promise
(no later event is earlier than a cut) because stamps are read times.
"""

from __future__ import annotations

import errno
import socket
import struct
import time
from typing import Callable

from mallory.errors import MalloryError
from mallory.observer.nfq import _NLATTR, _NLMSGHDR, NLMSG_ERROR, SO_RCVBUFFORCE

NETLINK_NETFILTER = 12
NFNL_SUBSYS_ULOG = 4
NFULNL_MSG_PACKET = 0
NFULNL_MSG_CONFIG = 1
NFULA_CFG_CMD = 1
NFULA_CFG_MODE = 2
NFULA_CFG_NLBUFSIZ = 3
NFULA_CFG_TIMEOUT = 4
NFULA_CFG_QTHRESH = 5
NFULA_CFG_FLAGS = 6
NFULNL_CFG_CMD_BIND = 1
NFULNL_CFG_CMD_UNBIND = 2
NFULNL_COPY_PACKET = 2
NFULNL_CFG_F_SEQ = 1
NFULA_PACKET_HDR = 1
NFULA_PAYLOAD = 9
NFULA_SEQ = 12
NLM_F_REQUEST = 1
NLM_F_ACK = 4
COPY_RANGE = 128

_NFGEN = struct.Struct("!BBH")
_HOOK = struct.Struct("!HB")
_SEQ = struct.Struct("!I")
_PACKET_TYPE = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET


def _attr(kind: int, payload: bytes) -> bytes:
    data = _NLATTR.pack(4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def parse_datagram(buf: bytearray, view: memoryview, n: int, ts: int, out: list) -> None:
    """Append (sequence number or None, hook, ts, payload) for every logged-packet message in
    the first n bytes of a netlink datagram (other messages are skipped)."""
    unpack_msg, unpack_attr = _NLMSGHDR.unpack_from, _NLATTR.unpack_from
    off = 0
    while off + 16 <= n:
        msg_len, msg_type, _flags, _seq, _pid = unpack_msg(buf, off)
        if msg_len < 16 or off + msg_len > n:
            return
        end = off + msg_len
        if msg_type == _PACKET_TYPE:
            hook, seq = -1, None
            payload = b""
            a = off + 20
            while a + 4 <= end:
                a_len, a_type = unpack_attr(buf, a)
                if a_len < 4 or a + a_len > end:
                    break
                a_type &= 0x3FFF
                if a_type == NFULA_PACKET_HDR:
                    _proto, hook = _HOOK.unpack_from(buf, a + 4)
                elif a_type == NFULA_PAYLOAD:
                    payload = bytes(view[a + 4 : a + a_len])
                elif a_type == NFULA_SEQ:
                    seq = _SEQ.unpack_from(buf, a + 4)[0]
                a += (a_len + 3) & ~3
            out.append((seq, hook, ts, payload))
        off += (msg_len + 3) & ~3


class NfLog:
    """One bound NFLOG group in the current network namespace."""

    def __init__(
        self, group: int, *, threshold: int = 1, flush_cs: int = 1, nlbufsiz: int = 65536, rcvbuf: int = 8 << 20,
        copy_range: int = COPY_RANGE,
    ) -> None:
        """copy_range: how many bytes of each packet are copied to us (whole packets to
        frame messages)."""
        self.group = group
        self.lost = 0
        self.received = 0
        self.reads = 0  # drains that found packets: received / reads = packets per wakeup
        self._last_seq: int | None = None
        self._seq = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self._sock.bind((0, 0))
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
            except OSError:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self._config(_attr(NFULA_CFG_CMD, bytes([NFULNL_CFG_CMD_BIND])))
            self._config(
                _attr(NFULA_CFG_MODE, struct.pack("!IBx", copy_range, NFULNL_COPY_PACKET))
                + _attr(NFULA_CFG_NLBUFSIZ, struct.pack("!I", nlbufsiz))
                + _attr(NFULA_CFG_TIMEOUT, struct.pack("!I", flush_cs))
                + _attr(NFULA_CFG_QTHRESH, struct.pack("!I", threshold))
                + _attr(NFULA_CFG_FLAGS, struct.pack("!H", NFULNL_CFG_F_SEQ))
            )
        except BaseException:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self._buf = bytearray(max(nlbufsiz, 65536) * 2)
        self._view = memoryview(self._buf)

    def _config(self, attrs: bytes) -> None:
        """Send one config message and wait for its ack (MalloryError on a netlink error)."""
        self._seq += 1
        body = _NFGEN.pack(socket.AF_UNSPEC, 0, self.group) + attrs
        header = _NLMSGHDR.pack(16 + len(body), (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self._seq, 0)
        self._sock.send(header + body)
        self._sock.settimeout(2.0)
        while True:
            data = self._sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, off)
                if kind == NLMSG_ERROR and seq == self._seq:
                    code = -struct.unpack_from("=i", data, off + 16)[0]
                    if code:
                        raise MalloryError(
                            f"NFLOG group {self.group}: config refused ({errno.errorcode.get(code, code)}); is another observer bound?"
                        )
                    return
                off += (length + 3) & ~3

    def fileno(self) -> int:
        return self._sock.fileno()

    def drain(self, on_packets: Callable[[list[tuple[int | None, int, int, bytes]]], None], limit: int = 4096) -> int:
        """Read every pending copy (up to `limit`) and hand them to on_packets as
        (sequence number, hook, mono_ns, ip_bytes) tuples."""
        got: list[tuple[int | None, int, int, bytes]] = []
        buf, view, recv_into = self._buf, self._view, self._sock.recv_into
        monotonic_ns = time.monotonic_ns
        while len(got) < limit:
            try:
                n = recv_into(buf)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # socket overrun: the gap in seq counts it
                    continue
                raise
            parse_datagram(buf, view, n, monotonic_ns(), got)
        for seq, _hook, _ts, _payload in got:
            if seq is not None:
                if self._last_seq is not None and seq > self._last_seq + 1:
                    self.lost += seq - self._last_seq - 1
                self._last_seq = seq
        if got:
            on_packets(got)
        self.received += len(got)
        self.reads += bool(got)
        return len(got)

    def close(self) -> None:
        if self._sock.fileno() < 0:
            return
        try:
            self._sock.setblocking(True)
            self._config(_attr(NFULA_CFG_CMD, bytes([NFULNL_CFG_CMD_UNBIND])))
        except (OSError, MalloryError):
            pass  # closing the socket unbinds too
        self._sock.close()
