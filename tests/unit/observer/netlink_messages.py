"""Netlink messages laid out as the kernel writes them (nfnetlink_queue and
nfnetlink_log), for tests and benchmarks of the observer's parsers without root."""

from __future__ import annotations

import socket
import struct

from mallory.observer import nflog, nfq


def attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _message(msg_type: int, attrs: bytes) -> bytes:
    body = struct.pack("!BBH", socket.AF_INET, 0, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), msg_type, 0, 0, 0) + body


def queued_packet(packet_id: int, hook: int, ip_packet: bytes, copy_range: int = nfq.COPY_RANGE) -> bytes:
    """An NFQNL_MSG_PACKET: header first, device and capture length in between, the
    payload (truncated to copy_range) last, in the kernel's order."""
    attrs = attr(nfq.NFQA_PACKET_HDR, struct.pack("!IHB", packet_id, 0x0800, hook))
    attrs += attr(5 if hook == nfq.NF_INET_LOCAL_OUT else 4, struct.pack("!I", 2))  # IFINDEX_OUT/INDEV
    if len(ip_packet) > copy_range:
        attrs += attr(12, struct.pack("!I", len(ip_packet)))  # NFQA_CAP_LEN
    attrs += attr(nfq.NFQA_PAYLOAD, ip_packet[:copy_range])
    return _message(nfq.NFQNL_MSG_PACKET, attrs)


def logged_packet(seq: int, hook: int, ip_packet: bytes, copy_range: int = nflog.COPY_RANGE) -> bytes:
    """An NFULNL_MSG_PACKET as nfnetlink_log writes it (with NFULNL_CFG_F_SEQ)."""
    attrs = attr(nflog.NFULA_PACKET_HDR, struct.pack("!HBx", 0x0800, hook))
    attrs += attr(nflog.NFULA_PAYLOAD, ip_packet[:copy_range])
    attrs += attr(nflog.NFULA_SEQ, struct.pack("!I", seq))
    return _message((nflog.NFNL_SUBSYS_ULOG << 8) | nflog.NFULNL_MSG_PACKET, attrs)


def tcp_packet(payload: bytes, seq: int = 1000, ident: int = 7) -> bytes:
    """An IPv4 TCP segment 10.1.1.2:5000 -> 10.1.2.2:9000 carrying payload."""
    tcp = struct.pack("!HHIIBBHHH", 5000, 9000, seq, 0, 5 << 4, 0x18, 65535, 0, 0)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, ident, 0x4000, 64, 6, 0,
                     socket.inet_aton("10.1.1.2"), socket.inet_aton("10.1.2.2"))
    return ip + tcp + payload
