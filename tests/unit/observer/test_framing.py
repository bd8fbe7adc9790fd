"""The stream framers of mallory/observer/framing.py on hand-made segments: length-prefixed
and delimited framing, headers split across segments, many messages per segment,
retransmissions, out-of-order segments, flows met mid-stream, and the per-node splitter on
raw IPv4 packets (which flows it frames, what it forgets)."""

from __future__ import annotations

import socket
import struct

import pytest

from mallory.observer import framing
from mallory.observer.framing import MessageSplitter, flow_factory
from mallory.observer.messages import MessageFormat, PeerMessages, parse_messages
from mallory.timeline.event import CONTINUATION, UNKNOWN_MESSAGE

#: 4-byte big-endian body length, then a 1-byte type: header 5 bytes
TLV = parse_messages({"length": {"offset": 0, "size": 4, "header": 5},
                      "type": {"offset": 4, "names": {"1": "ping", "2": "pong", "0x10": "bulk"}, "default": "odd"}}, "t")
LINES = parse_messages({"delimiter": "\r\n", "type": {"names": {"86": "vote", "65": "append"}}}, "t")


def tlv(kind: int, body: bytes = b"") -> bytes:
    return struct.pack("!IB", len(body), kind) + body


def started(fmt: MessageFormat, isn: int = 1000) -> framing.Flow:
    """A flow of `fmt` that saw its SYN (sequence number isn): data starts at isn + 1."""
    flow = flow_factory(fmt)()
    assert flow.feed(isn, b"", syn=True) == []
    return flow


class Stream:
    """Segments of one byte stream by their offsets, with their sequence numbers."""

    def __init__(self, data: bytes, isn: int = 1000) -> None:
        self.data, self.isn = data, isn

    def seg(self, start: int, end: int) -> tuple[int, bytes]:
        return (self.isn + 1 + start) & 0xFFFFFFFF, self.data[start:end]


def test_many_messages_in_one_segment_and_a_body_over_several():
    flow = started(TLV)
    s = Stream(tlv(1) + tlv(2, b"xy") + tlv(1) + tlv(0x10, b"z" * 3000) + tlv(7))
    assert flow.feed(*s.seg(0, 1000)) == ["ping", "pong", "ping", "bulk"]
    assert flow.feed(*s.seg(1000, 2000)) == []
    assert flow.feed(*s.seg(2000, len(s.data))) == ["odd"]  # a number not listed: the default


def test_a_header_split_across_segments_names_the_message_where_it_completes():
    flow = started(TLV)
    s = Stream(tlv(1, b"abc") + tlv(2, b"d") + tlv(1))
    # the second message's header (5 bytes from offset 8) is cut after 2 bytes
    assert flow.feed(*s.seg(0, 10)) == ["ping"]
    assert flow.feed(*s.seg(10, 11)) == []  # still short of the type byte
    assert flow.feed(*s.seg(11, len(s.data))) == ["pong", "ping"]


def test_sequence_numbers_wrap():
    flow = started(TLV, isn=0xFFFFFFF0)
    s = Stream(tlv(1, b"q" * 20) + tlv(2), isn=0xFFFFFFF0)
    assert flow.feed(*s.seg(0, 20)) == ["ping"]
    assert s.seg(20, 30)[0] < 100  # past 2**32
    assert flow.feed(*s.seg(20, len(s.data))) == ["pong"]


def test_a_retransmission_reads_as_the_original_did():
    flow = started(TLV)
    s = Stream(tlv(1) + tlv(2, b"x" * 10) + tlv(1) + tlv(2))
    assert flow.feed(*s.seg(0, 12)) == ["ping", "pong"]
    assert flow.feed(*s.seg(12, len(s.data))) == ["ping", "pong"]
    assert flow.feed(*s.seg(0, 12)) == ["ping", "pong"]  # whole retransmission
    assert flow.feed(*s.seg(5, 12)) == ["pong"]  # re-segmented
    assert flow.feed(*s.seg(6, 12)) == []  # inside a body: starts nothing
    assert flow.feed(*s.seg(6, len(s.data) + 0)) == ["ping", "pong"]  # old bytes, then none new


def test_a_retransmission_beyond_what_is_remembered_is_unknown():
    flow = started(TLV)
    s = Stream(b"".join(tlv(1) for _ in range(framing.RECENT + 10)))
    assert flow.feed(*s.seg(0, len(s.data))) == ["ping"] * (framing.RECENT + 10)
    assert flow.feed(*s.seg(0, 5)) is None
    assert flow.feed(*s.seg(len(s.data) - 5, len(s.data))) == ["ping"]


def test_an_out_of_order_segment_is_unknown_until_the_gap_fills_then_sync_holds():
    flow = started(TLV)
    s = Stream(tlv(1) + tlv(2) + tlv(1, b"abc") + tlv(2))
    assert flow.feed(*s.seg(10, 18)) is None  # the header at 10 follows a gap with headers in it
    assert flow.feed(*s.seg(0, 10)) == ["ping", "pong"]
    assert flow.feed(*s.seg(18, len(s.data))) == ["pong"]  # the held one was framed meanwhile
    assert flow.feed(*s.seg(10, 18)) == ["ping"]  # and its retransmission is named


def test_a_gap_inside_a_body_does_not_hold_a_later_header_back():
    flow = started(TLV)
    s = Stream(tlv(0x10, b"b" * 3000) + tlv(1) + tlv(2))
    assert flow.feed(*s.seg(0, 1000)) == ["bulk"]
    assert flow.feed(*s.seg(2000, len(s.data))) == ["ping", "pong"]  # 1000..2000 missing: body only
    assert flow.feed(*s.seg(1000, 2000)) == []


def test_held_segments_are_bounded_and_an_unfilled_gap_costs_sync_until_a_write_starts():
    flow = started(TLV)
    s = Stream(tlv(1) * (framing.MAX_PENDING + 4))
    for k in range(1, framing.MAX_PENDING + 1):
        assert flow.feed(*s.seg(5 * k, 5 * k + 5)) is None
    assert len(flow.pending) == framing.MAX_PENDING
    assert flow.feed(*s.seg(5 * (framing.MAX_PENDING + 1), 5 * (framing.MAX_PENDING + 2))) is None
    assert not flow.pending and not flow.synced
    seq, data = s.seg(5 * (framing.MAX_PENDING + 2), 5 * (framing.MAX_PENDING + 3))
    assert flow.feed(seq, data, push=True) is None  # no write boundary known before it
    assert flow.feed(*s.seg(5 * (framing.MAX_PENDING + 3), len(s.data))) == ["ping"]  # after PSH: resynced


def test_a_flow_met_mid_stream_resyncs_at_a_write_start_and_refuses_a_bad_guess():
    flow = flow_factory(TLV)()
    s = Stream(tlv(1, b"abcdefgh") + tlv(2) + tlv(1))
    # first segment seen starts inside a message: its guess reads a length past `max`
    big = parse_messages({"length": {"offset": 0, "size": 4, "header": 5, "max": 100}, "type": {"offset": 4}}, "t")
    flow = flow_factory(big)()
    assert flow.feed(*Stream(b"\xff\xff\xff\xff\x01abc").seg(0, 8), push=True) is None
    assert not flow.synced
    flow = flow_factory(TLV)()
    assert flow.feed(*s.seg(13, 18), push=True) == ["pong"]  # its first segment: a write start
    assert flow.feed(*s.seg(18, len(s.data))) == ["ping"]
    joined = flow_factory(TLV)()
    assert joined.feed(*s.seg(3, 13)) is None  # mid-message: reads a huge length, refused
    assert joined.feed(*s.seg(13, 18)) is None  # no PSH before it: no guess
    assert joined.feed(*s.seg(18, len(s.data))) is None


def test_a_bare_ack_is_no_write_start_to_guess_at():
    flow = flow_factory(TLV)()
    s = Stream(tlv(1, b"abcdefgh") + tlv(2))
    assert flow.feed(*s.seg(3, 10)) is None  # met mid-message: refused
    assert flow.feed(s.seg(10, 10)[0], b"", push=True) == []  # an ACK with PSH
    assert flow.feed(*s.seg(10, 13)) is None and not flow.synced  # not taken for a write start


def test_a_framer_asking_for_its_own_bytes_or_too_many_loses_sync():
    class Greedy:
        peek = 4

        def cut(self, head: bytes, first: bool):
            return len(head) if head[0] == 1 else framing.MAX_HEAD + 1

    flow = framing.LengthFlow(Greedy())
    flow.feed(0, b"", syn=True)
    assert flow.feed(1, b"\x01abcdef") is None and not flow.synced
    flow = framing.LengthFlow(Greedy())
    flow.feed(0, b"", syn=True)
    assert flow.feed(1, b"\x02" * 70000) is None


def test_a_framer_that_raises_costs_sync_not_the_observer():
    class Broken:
        peek = 4

        def cut(self, head: bytes, first: bool):
            raise IndexError("the framer's own bug")

    flow = framing.LengthFlow(Broken())
    flow.feed(0, b"", syn=True)
    assert flow.feed(1, b"abcd") is None and not flow.synced


def test_delimited_lines_with_a_delimiter_split_across_segments():
    flow = started(LINES)
    s = Stream(b"V 1 n1\r\nA 1 x\r\nq\r\n\r\nA 2")
    assert flow.feed(*s.seg(0, 7)) == ["vote"]  # ends on the delimiter's \r
    assert flow.feed(*s.seg(7, 12)) == ["append"]
    assert flow.feed(*s.seg(12, 17)) == ["other"]  # "x\r\nq\r": a type not listed
    assert flow.feed(*s.seg(17, len(s.data))) == ["append"]  # "\n\r\nA 2": an empty line names nothing


def test_delimited_naming_waits_for_the_type_bytes_and_names_short_lines_by_default():
    fmt = parse_messages({"delimiter": "\n", "type": {"offset": 2, "size": 2, "names": {"0x6f6b": "ok-reply"}}}, "t")
    flow = started(fmt)
    s = Stream(b"> ok\n>\n> o")
    assert flow.feed(*s.seg(0, 3)) == []  # the type field is bytes 2..4
    assert flow.feed(*s.seg(3, 9)) == ["ok-reply", "other"]  # ">" ends before its field
    assert flow.feed(*s.seg(9, 10)) == []
    assert flow.feed(*s.seg(10, 11)) == []  # "> o" unnamed until more comes


def test_a_delimited_flow_met_mid_stream_resyncs_after_its_first_delimiter():
    flow = flow_factory(LINES)()
    s = Stream(b"tail of a line\r\nV 2 n3\r\nA 2 n3\r\n")
    assert flow.feed(*s.seg(0, 8)) is None
    assert flow.feed(*s.seg(8, 20)) == ["vote"]
    assert flow.feed(*s.seg(20, len(s.data))) == ["append"]


def classify(head: bytes) -> str:
    if head.startswith(b"boom"):
        raise ValueError("the classifier's own bug")
    return head.split(b" ", 1)[0].decode().lower()


def test_a_classifier_names_from_the_first_peek_bytes_and_its_failures_are_unclassified():
    fmt = parse_messages({"delimiter": "\n", "classifier": f"{__name__}:classify", "peek": 8}, "t")
    flow = started(fmt)
    assert flow.feed(*Stream(b"HELLO world\nboom\n12\nWORLD\n").seg(0, 26)) == ["hello", "unclassified", "unclassified", "world"]


def test_a_length_framed_classifier_gets_at_most_the_message():
    seen = []

    def spy(head: bytes) -> str:
        seen.append(head)
        return "msg"

    fmt = MessageFormat(length=TLV.length, classifier="x:y", peek=64)
    cutter = framing.LengthCutter(fmt.length, 64, spy)
    flow = framing.LengthFlow(cutter)
    flow.feed(0, b"", syn=True)
    data = tlv(1, b"ab") + tlv(2, b"c" * 100)
    assert flow.feed(1, data) == ["msg", "msg"]
    assert seen == [tlv(1, b"ab"), tlv(2, b"c" * 100)[:64]]


# -- the splitter on raw packets -----------------------------------------------------------

PEER = 7001


def packet(payload: bytes, seq: int, sport: int = 40000, dport: int = PEER, flags: int = 0x10,
           src: str = "10.0.1.2", proto: int = 6) -> bytes:
    if proto == 6:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0)
    else:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + len(payload), 1, 0x4000, 64, proto, 0,
                     socket.inet_aton(src), socket.inet_aton("10.0.2.2"))
    return ip + l4 + payload


def test_the_splitter_frames_declared_tcp_ports_only():
    splitter = MessageSplitter(PeerMessages(TLV, (PEER,)))
    assert splitter.data(packet(tlv(1), 5, dport=7000), 1) is None
    assert splitter.data(packet(tlv(1), 5, proto=17), 1) is None
    assert splitter.data(packet(b"", 99, flags=0x02), 1) == ""  # SYN
    assert splitter.data(packet(tlv(2) + tlv(1) + tlv(2), 100, flags=0x18), 2) == "ping+pong"
    assert splitter.data(packet(b"\0\0\0\x09\x10abcd", 115), 3) == "bulk"
    assert splitter.data(packet(b"efghi", 124), 4) == CONTINUATION
    # the other direction of the connection, met mid-stream, from the peer port
    assert splitter.data(packet(b"\x00\x00", 7, sport=PEER, dport=40000, src="10.0.2.2"), 5) == UNKNOWN_MESSAGE


def test_the_splitter_forgets_flows_on_fin_rst_idle_and_when_full():
    splitter = MessageSplitter(PeerMessages(TLV, (PEER,)), max_flows=3, idle_ns=1000)
    splitter.data(packet(b"", 99, flags=0x02), 0)
    splitter.data(packet(tlv(1), 100, flags=0x19), 1)  # FIN with data: framed, then forgotten
    assert not splitter.flows
    assert splitter.data(packet(tlv(1), 105), 2) == "ping"  # met anew: a guess at its first segment
    splitter.data(packet(tlv(1), 110, flags=0x14), 3)  # RST
    assert not splitter.flows
    for port in (40001, 40002, 40003, 40004):
        splitter.data(packet(tlv(1), 1, sport=port), 10)
    assert len(splitter.flows) == 3  # the oldest made room
    splitter.data(packet(tlv(1), 1, sport=40005), 10 + 2000)
    assert len(splitter.flows) == 1  # the idle ones swept


def test_a_message_name_joined_data_is_bounded():
    names = [f"name-{i:02d}-" + "x" * 20 for i in range(10)]
    fmt = parse_messages({"length": {"offset": 0, "size": 1, "header": 2}, "type": {"offset": 1, "names": {
        str(i): n for i, n in enumerate(names)}}}, "t")
    splitter = MessageSplitter(PeerMessages(fmt, (PEER,)))
    data = splitter.data(packet(b"".join(bytes([0, i]) for i in range(10)), 1), 1)
    assert data == "+".join(names[:3]) and len(data) <= 96


@pytest.mark.parametrize("payload", [b"", b"\x00"])
def test_the_splitter_ignores_packets_without_payload_on_unknown_flows(payload):
    splitter = MessageSplitter(PeerMessages(TLV, (PEER,)))
    assert splitter.data(packet(payload, 1), 1) == ("" if not payload else UNKNOWN_MESSAGE)
    assert len(splitter.flows) == (1 if payload else 0)
