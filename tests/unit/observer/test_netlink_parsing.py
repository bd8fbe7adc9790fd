"""The observer's netlink parsers on messages laid out as the kernel writes them (no root)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mallory.observer import nflog, nfq
from mallory.observer.packet import id_and_data

from .netlink_messages import logged_packet, queued_packet, tcp_packet


def _parse(module, data: bytes, ts: int = 5) -> list:
    buf = bytearray(data)
    out: list = []
    module.parse_datagram(buf, memoryview(buf), len(buf), ts, out)
    return out


@given(payload=st.binary(max_size=3000), packet_id=st.integers(1, 2**32 - 1), out_hook=st.booleans())
def test_nfqueue_message_gives_id_hook_and_the_copied_bytes(payload, packet_id, out_hook):
    hook = nfq.NF_INET_LOCAL_OUT if out_hook else nfq.NF_INET_LOCAL_IN
    ip = tcp_packet(payload)
    [(got_id, got_hook, ts, copied)] = _parse(nfq, queued_packet(packet_id, hook, ip))
    assert (got_id, got_hook, ts) == (packet_id, hook, 5)
    assert copied == ip[: nfq.COPY_RANGE]
    assert id_and_data(copied) == id_and_data(ip)  # the copy range loses nothing the id needs


@given(payload=st.binary(max_size=3000))
def test_whole_packet_copies_for_framing_arrive_whole_through_either_reader(payload):
    ip = tcp_packet(payload)
    [(_, _, _, queued)] = _parse(nfq, queued_packet(9, nfq.NF_INET_LOCAL_IN, ip, copy_range=nfq.FULL_COPY))
    [(_, _, _, logged)] = _parse(nflog, logged_packet(9, nfq.NF_INET_LOCAL_IN, ip, copy_range=nfq.FULL_COPY))
    assert queued == logged == ip


def test_several_messages_in_one_datagram_and_foreign_messages_are_skipped():
    ip = tcp_packet(b"hello")
    error = b"\x14\x00\x00\x00\x02\x00\x00\x00" + b"\x00" * 12  # an NLMSG_ERROR (ack)
    data = queued_packet(1, 3, ip) + error + queued_packet(2, 1, tcp_packet(b"x" * 500))
    got = _parse(nfq, data)
    assert [(i, h) for i, h, _, _ in got] == [(1, 3), (2, 1)]
    assert got[0][3] == ip


def _parse_first(module, buf: bytes, n: int) -> list:
    """Parse the first n bytes of `buf`, as `drain` does: the receive buffer is larger than
    the datagram and holds stale bytes past n (here: the rest of a real datagram)."""
    data = bytearray(buf)
    out: list = []
    module.parse_datagram(data, memoryview(data), n, 5, out)
    return out


def test_a_truncated_datagram_yields_exactly_the_messages_complete_before_the_cut():
    """Three queued packets in one datagram, cut at every length: the result is the packets
    whose whole message lies before the cut, never one that reads a byte past it, though
    the buffer holds the real rest of the datagram there."""
    ips = [tcp_packet(b"abc" * 100), tcp_packet(b"x" * 3, seq=7), tcp_packet(b"y" * 40, seq=9)]
    messages = [queued_packet(9 + i, 3, ip) for i, ip in enumerate(ips)]
    data = b"".join(messages)
    ends = [sum(len(m) for m in messages[: i + 1]) for i in range(len(messages))]
    for cut in range(len(data) + 1):
        whole = sum(end <= cut for end in ends)
        got = _parse_first(nfq, data, cut)
        assert [(i, h, copied) for i, h, _, copied in got] == [
            (9 + i, 3, ips[i][: nfq.COPY_RANGE]) for i in range(whole)
        ], f"cut at {cut} of {len(data)}"


def test_a_truncated_nflog_datagram_yields_exactly_the_complete_messages():
    ips = [tcp_packet(b"abc" * 100), tcp_packet(b"z" * 9, seq=3)]
    messages = [logged_packet(40 + i, nfq.NF_INET_LOCAL_IN, ip) for i, ip in enumerate(ips)]
    data = b"".join(messages)
    ends = [sum(len(m) for m in messages[: i + 1]) for i in range(len(messages))]
    for cut in range(len(data) + 1):
        whole = sum(end <= cut for end in ends)
        got = _parse_first(nflog, data, cut)
        assert [(seq, copied) for seq, _, _, copied in got] == [
            (40 + i, ips[i][: nflog.COPY_RANGE]) for i in range(whole)
        ], f"cut at {cut} of {len(data)}"


@given(payload=st.binary(max_size=3000), seq=st.integers(0, 2**32 - 1))
def test_nflog_message_gives_seq_hook_and_the_copied_bytes(payload, seq):
    ip = tcp_packet(payload)
    [(got_seq, hook, _, copied)] = _parse(nflog, logged_packet(seq, nfq.NF_INET_LOCAL_IN, ip))
    assert (got_seq, hook) == (seq, nfq.NF_INET_LOCAL_IN)
    assert copied == ip[: nflog.COPY_RANGE]
