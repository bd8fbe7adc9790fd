"""Real IPv4 TCP/UDP packet bytes for the tests, built with struct (checksums included)."""

from __future__ import annotations

import struct

from mallory.observer.packet import TCP, UDP, ip_int


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(src: str, dst: str, proto: int, transport: bytes, *, ident: int = 0x1234, ttl: int = 64,
         frag: int = 0x4000, options: bytes = b"") -> bytes:
    ihl = 5 + len(options) // 4
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(transport), ident, frag, ttl,
                         proto, 0, ip_int(src).to_bytes(4, "big"), ip_int(dst).to_bytes(4, "big")) + options
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    return header + transport


def _pseudo(src: str, dst: str, proto: int, length: int) -> bytes:
    return struct.pack("!4s4sBBH", ip_int(src).to_bytes(4, "big"), ip_int(dst).to_bytes(4, "big"), 0, proto, length)


def tcp(src: str, dst: str, sport: int, dport: int, seq: int, payload: bytes = b"", *, ident: int = 0x1234,
        ttl: int = 64, flags: int = 0x18, tcp_options: bytes = b"", ip_options: bytes = b"") -> bytes:
    offset = 5 + len(tcp_options) // 4
    segment = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, offset << 4, flags, 65535, 0, 0) + tcp_options + payload
    csum = checksum(_pseudo(src, dst, TCP, len(segment)) + segment)
    segment = segment[:16] + struct.pack("!H", csum) + segment[18:]
    return ipv4(src, dst, TCP, segment, ident=ident, ttl=ttl, options=ip_options)


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes = b"", *, ident: int = 0x1234,
        ttl: int = 64) -> bytes:
    datagram = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    csum = checksum(_pseudo(src, dst, UDP, len(datagram)) + datagram) or 0xFFFF
    datagram = datagram[:6] + struct.pack("!H", csum) + datagram[8:]
    return ipv4(src, dst, UDP, datagram, ident=ident, ttl=ttl)


def udp_checksum(packet: bytes) -> int:
    ihl = (packet[0] & 15) * 4
    return struct.unpack_from("!H", packet, ihl + 6)[0]
