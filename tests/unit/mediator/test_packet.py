import struct

from hypothesis import given
from hypothesis import strategies as st

from mallory.observer.packet import (
    TCP,
    UDP,
    addresses,
    id_of,
    ip_int,
    ip_str,
    packet_id,
    parse,
)
from tests.unit.mediator.packets import ipv4, tcp, udp, udp_checksum


def test_tcp_fields_id_and_payload():
    pkt = tcp("10.0.1.2", "10.0.3.2", 40000, 5000, 0xDEADBEEF, b"\x17\x03\x03\x00\x20rest", ident=777)
    p = parse(pkt)
    assert p is not None
    assert (ip_str(p.src), ip_str(p.dst), p.proto, p.sport, p.dport) == ("10.0.1.2", "10.0.3.2", TCP, 40000, 5000)
    assert p.data == "17030300"
    assert p.id == packet_id(ip_int("10.0.1.2"), ip_int("10.0.3.2"), TCP, 40000, 5000, 777, 0xDEADBEEF)


def test_udp_id_uses_checksum_not_length():
    pkt = udp("10.0.1.2", "10.0.2.2", 53, 5353, b"ab", ident=9)
    p = parse(pkt)
    assert p.proto == UDP and p.data == "6162"
    assert p.id == packet_id(ip_int("10.0.1.2"), ip_int("10.0.2.2"), UDP, 53, 5353, 9, udp_checksum(pkt))


def test_forwarding_changes_nothing_in_the_id():
    # The gateway decrements the TTL and rewrites the header checksum; the id must not move.
    sent = tcp("10.0.1.2", "10.0.2.2", 1, 2, 42, b"hello", ttl=64)
    forwarded = tcp("10.0.1.2", "10.0.2.2", 1, 2, 42, b"hello", ttl=63)
    assert sent != forwarded
    assert parse(sent).id == parse(forwarded).id


def test_every_id_field_matters():
    base = dict(sport=1000, dport=2000, seq=5, ident=1)
    ids = {parse(tcp("10.0.1.2", "10.0.2.2", base["sport"], base["dport"], base["seq"], ident=base["ident"])).id}
    ids.add(parse(tcp("10.0.1.3", "10.0.2.2", 1000, 2000, 5, ident=1)).id)
    ids.add(parse(tcp("10.0.1.2", "10.0.2.3", 1000, 2000, 5, ident=1)).id)
    ids.add(parse(tcp("10.0.1.2", "10.0.2.2", 1001, 2000, 5, ident=1)).id)
    ids.add(parse(tcp("10.0.1.2", "10.0.2.2", 1000, 2001, 5, ident=1)).id)
    ids.add(parse(tcp("10.0.1.2", "10.0.2.2", 1000, 2000, 6, ident=1)).id)
    ids.add(parse(tcp("10.0.1.2", "10.0.2.2", 1000, 2000, 5, ident=2)).id)
    assert len(ids) == 7


def test_payload_offsets_honour_ip_and_tcp_options():
    pkt = tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, b"\xaa\xbb\xcc\xdd\xee",
              tcp_options=b"\x01\x01\x01\x01" * 3, ip_options=b"\x01\x01\x01\x00")
    p = parse(pkt)
    assert p.data == "aabbccdd" and (p.sport, p.dport) == (1, 2)


def test_empty_and_short_payloads():
    assert parse(tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, flags=0x10)).data == ""
    assert parse(udp("10.0.1.2", "10.0.2.2", 1, 2, b"\x01")).data == "01"
    # Ethernet padding after the IP total length is not payload.
    assert parse(tcp("10.0.1.2", "10.0.2.2", 1, 2, 3) + b"\x00" * 6).data == ""


def test_not_parsed():
    icmp = ipv4("10.0.1.2", "10.0.2.2", 1, b"\x08\x00" + b"\x00" * 6)
    assert parse(icmp) is None
    assert addresses(icmp) == (ip_int("10.0.1.2"), ip_int("10.0.2.2"))
    assert parse(b"") is None and addresses(b"\x60" + b"\x00" * 39) is None
    later_fragment = ipv4("10.0.1.2", "10.0.2.2", TCP, b"\x00" * 40, frag=0x0010)
    assert parse(later_fragment) is None
    truncated = tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, b"xyz")[:30]
    assert parse(truncated) is None
    ipv6 = b"\x60" + tcp("10.0.1.2", "10.0.2.2", 1, 2, 3)[1:]
    assert parse(ipv6) is None


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 65535), st.integers(0, 65535),
       st.integers(0, 2**32 - 1), st.integers(0, 65535), st.binary(max_size=12))
def test_parse_agrees_with_reference_encoding(src, dst, sport, dport, seq, ident, payload):
    s, d = ip_str(src), ip_str(dst)
    p = parse(tcp(s, d, sport, dport, seq, payload, ident=ident))
    assert p.id == packet_id(src, dst, TCP, sport, dport, ident, seq)
    assert 0 <= p.id < 2**64
    assert p.data == payload[:4].hex()
    u = udp(s, d, sport, dport, payload, ident=ident)
    assert parse(u).id == packet_id(src, dst, UDP, sport, dport, ident, udp_checksum(u))


def test_the_id_only_parse_agrees_with_parse():
    # The firewall's per-packet path keeps ids only: same id, same refusals, no payload read.
    packets = [tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, b"hello"), udp("10.0.1.2", "10.0.2.2", 53, 5353, b"ab"),
               tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, flags=0x10)]
    assert [id_of(p) for p in packets] == [parse(p).id for p in packets]
    refused = [ipv4("10.0.1.2", "10.0.2.2", 1, b"\x08\x00" + b"\x00" * 6),
               tcp("10.0.1.2", "10.0.2.2", 1, 2, 3, b"xyz")[:30], b""]
    assert [id_of(p) for p in refused] == [None, None, None]


def test_reference_encoding_is_19_bytes_big_endian():
    # The documented layout: a change to it is a wire-format change for every vantage point.
    from hashlib import blake2b
    enc = struct.pack("!IIBHHHI", 1, 2, 6, 3, 4, 5, 6)
    assert len(enc) == 19
    assert packet_id(1, 2, 6, 3, 4, 5, 6) == int.from_bytes(blake2b(enc, digest_size=8).digest(), "big")
