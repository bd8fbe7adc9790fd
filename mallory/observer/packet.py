"""Struct-level IPv4 TCP/UDP parsing, the packet id and the payload abstraction.

Observers (INPUT/OUTPUT) and the mediator (FORWARD) call `parse` on the raw IPv4 packet
NFQUEUE hands them; it must agree at all three vantage points and be fast (no scapy).

Packet id (DESIGN.md, "Packet id"). The canonical encoding is 19 bytes, every field
big-endian exactly as it sits on the wire:

    offset  size  field
     0      4     source IPv4 address
     4      4     destination IPv4 address
     8      1     IP protocol (6 TCP, 17 UDP)
     9      2     source port
    11      2     destination port
    13      2     IP identification
    15      4     TCP: sequence number; UDP: 0x0000 followed by the UDP checksum

    id = int.from_bytes(blake2b(encoding, digest_size=8).digest(), "big")

None of these fields changes when the gateway forwards a packet (TTL and the IP header
checksum do, and are left out), so the sender's observer, the mediator and the receiver's
observer compute the same id. `packet_id` builds the encoding from field values and is the
reference; `parse` slices the same bytes straight out of the packet, which is what makes it
fast (measured by bench/bench_mediator_forwarding.py, several 100k packets/s).

Payload abstraction: the hex of the first 4 payload bytes ("" when there is no payload),
which is an event's `data` for SEND and RECV. On TCP only the segment that starts an
application write has a meaningful first 4 bytes; `WriteStarts` (an observer's, per flow)
marks the rest of a multi-segment write as CONTINUATION, else every chunk of a large reply
or a replication stream would be an event type of its own.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import NamedTuple

# CONTINUATION, the payload abstraction of a TCP segment in the middle or at the end of a
# larger write, is the event model's (re-exported here for WriteStarts' users)
from mallory.timeline.event import CONTINUATION as CONTINUATION

try:  # hashlib.blake2b is this one, but importing hashlib loads OpenSSL: 3.6 MB more in every observer
    from _blake2 import blake2b
except ImportError:  # a CPython built without its own blake2
    from hashlib import blake2b

TCP = 6
UDP = 17

#: The 20-byte fixed IPv4 header in one unpack: version/ihl, (tos), total length,
#: identification, flags/fragment offset, (ttl), protocol, (checksum), source, destination.
IPV4_HEADER = struct.Struct("!BxHHHxBxxII")
_PORTS = struct.Struct("!HH")
#: Source and destination address at offset 12 (a hot path unpacks just these).
ADDRESSES = struct.Struct("!II")
_ID_FIELDS = struct.Struct("!IIBHHHI")
_FRAGMENT_OFFSET_MASK = 0x1FFF
_PAYLOAD_BYTES = 4


class Packet(NamedTuple):
    """What the observers and the mediator keep of one IPv4 TCP or UDP packet.

    src, dst: IPv4 addresses as 32-bit integers (cheap dict keys; `ip_str` for display).
    """

    src: int
    dst: int
    proto: int
    sport: int
    dport: int
    id: int
    data: str


def packet_id(src: int, dst: int, proto: int, sport: int, dport: int, ident: int, seq_or_csum: int) -> int:
    """The packet id from field values (the reference definition; see the module docstring).

    seq_or_csum is the TCP sequence number or the UDP checksum.
    """
    encoding = _ID_FIELDS.pack(src, dst, proto, sport, dport, ident, seq_or_csum)
    return int.from_bytes(blake2b(encoding, digest_size=8).digest(), "big")


def id_of(buf: bytes) -> int | None:
    """The packet id of a raw IPv4 packet, None where `id_and_data` gives None: the
    firewall's per-packet path, which keeps ids only (no payload hex is built)."""
    found = _id_and_offset(buf)
    return None if found is None else found[0]


def id_and_data(buf: bytes) -> tuple[int, str] | None:
    """(packet id, payload abstraction) of a raw IPv4 packet, or None for anything that is
    not a complete first fragment of IPv4 TCP/UDP (other protocols, later fragments,
    truncated headers)."""
    found = _id_and_offset(buf)
    if found is None:
        return None
    ident, offset, end = found
    return ident, buf[offset : min(offset + _PAYLOAD_BYTES, end)].hex() if offset < end else ""


def _id_and_offset(buf: bytes) -> tuple[int, int, int] | None:
    """(packet id, payload offset, payload end) of a raw IPv4 packet (see `id_and_data`);
    no object but the result is built."""
    if len(buf) < 20:
        return None
    ver_ihl, total_len, _ident, frag, proto, _src, _dst = IPV4_HEADER.unpack_from(buf)
    ihl = (ver_ihl & 0x0F) * 4
    if ver_ihl >> 4 != 4 or ihl < 20 or frag & _FRAGMENT_OFFSET_MASK:
        return None
    end = min(total_len, len(buf))
    if proto == TCP:
        if end < ihl + 20:
            return None
        tail = buf[ihl + 4 : ihl + 8]
        offset = ihl + (buf[ihl + 12] >> 4) * 4
    elif proto == UDP:
        if end < ihl + 8:
            return None
        tail = b"\x00\x00" + buf[ihl + 6 : ihl + 8]
        offset = ihl + 8
    else:
        return None
    encoding = buf[12:20] + buf[9:10] + buf[ihl : ihl + 4] + buf[4:6] + tail
    return int.from_bytes(blake2b(encoding, digest_size=8).digest(), "big"), offset, end


_PSH = 0x08


class WriteStarts:
    """Per TCP flow (one direction), whether the next segment starts a new write.

    The kernel sets PSH on the last segment of each write it sends, so a segment that
    follows a segment without PSH on its flow continues the same write. The first segment
    seen on a flow counts as a start. At most `limit` flows are remembered (the table is
    emptied when full: a forgotten flow only restarts as "start")."""

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        self._after_push: dict[bytes, bool] = {}

    def data(self, buf: bytes, data: str) -> str:
        """`data` (id_and_data's abstraction of buf) or CONTINUATION for a TCP segment
        with payload that continues a write."""
        if not data or buf[9] != TCP:
            return data
        ihl = (buf[0] & 0x0F) * 4
        flow = buf[12:20] + buf[ihl : ihl + 4]
        table = self._after_push
        starts = table.get(flow, True)
        if len(table) >= self.limit and flow not in table:
            table.clear()
        table[flow] = bool(buf[ihl + 13] & _PSH)
        return data if starts else CONTINUATION


def parse(buf: bytes) -> Packet | None:
    """The Packet of a raw IPv4 packet, or None where `id_and_data` gives None."""
    found = id_and_data(buf)
    if found is None:
        return None
    src, dst = ADDRESSES.unpack_from(buf, 12)
    sport, dport = _PORTS.unpack_from(buf, (buf[0] & 0x0F) * 4)
    return Packet(src, dst, buf[9], sport, dport, found[0], found[1])


def addresses(buf: bytes) -> tuple[int, int] | None:
    """(src, dst) of any IPv4 packet as integers, or None if it is not IPv4.

    The mediator's link rules apply to every packet between nodes (ICMP too), not only to
    the TCP/UDP packets that get an id.
    """
    if len(buf) < 20 or buf[0] >> 4 != 4:
        return None
    return ADDRESSES.unpack_from(buf, 12)


def ip_int(address: str) -> int:
    """'10.0.1.2' -> its 32-bit integer (ValueError for anything but a dotted quad)."""
    return int(ipaddress.IPv4Address(address))


def ip_str(address: int) -> str:
    """A 32-bit integer -> dotted quad."""
    return socket.inet_ntoa(address.to_bytes(4, "big"))
