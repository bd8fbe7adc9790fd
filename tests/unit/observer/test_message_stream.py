"""The gateway's framing of a whole stream (framing.MessageStream): whole messages with
their bytes and offsets, however the bytes arrive, and unframed bytes once sync is lost."""

from __future__ import annotations

import struct

from mallory.observer.framing import Piece, stream_factory
from mallory.observer.messages import DEFAULT_MAX_LENGTH, parse_messages
from mallory.suts.raft_kv import wire

TLV = parse_messages({"length": {"offset": 0, "size": 4, "header": 5, "max": 100},
                      "type": {"offset": 4, "names": {"1": "ping", "2": "pong"}, "default": "odd"}}, "t")
LINES = parse_messages({"delimiter": "\r\n", "type": {"names": {"86": "vote", "65": "append"}}}, "t")
LIBRAFT = parse_messages({"framer": "mallory.suts.raft_kv.wire:LIBRAFT_UV"}, "t")


def tlv(kind: int, body: bytes = b"") -> bytes:
    return struct.pack("!IB", len(body), kind) + body


def fed(stream, chunks) -> list[Piece]:
    return [piece for chunk in chunks for piece in stream.feed(chunk)]


def test_length_framed_messages_come_whole_with_offsets_however_the_bytes_arrive():
    data = tlv(1, b"abc") + tlv(2) + tlv(9, b"x" * 20)
    whole = fed(stream_factory(TLV)(), [data])
    assert [(p.offset, p.name) for p in whole] == [(0, "ping"), (8, "pong"), (13, "odd")]
    assert b"".join(p.data for p in whole) == data
    byte_by_byte = fed(stream_factory(TLV)(), [data[i : i + 1] for i in range(len(data))])
    assert byte_by_byte == whole


def test_a_message_is_given_only_once_its_last_byte_arrives():
    stream = stream_factory(TLV)()
    message = tlv(1, b"hello")
    assert stream.feed(message[:7]) == []
    assert stream.feed(message[7:] + tlv(2)[:2]) == [Piece(0, message, "ping")]
    assert stream.flush() == [Piece(len(message), tlv(2)[:2], None)]


def test_an_incredible_length_loses_sync_and_the_rest_passes_unframed():
    stream = stream_factory(TLV)()
    too_long = struct.pack("!IB", 1000, 1)
    assert stream.feed(tlv(1) + too_long) == [Piece(0, tlv(1), "ping"), Piece(5, too_long, None)]
    assert not stream.synced
    assert stream.feed(tlv(2)) == [Piece(10, tlv(2), None)]


def test_delimited_lines_and_a_line_past_the_bound():
    stream = stream_factory(LINES)()
    pieces = fed(stream, [b"V 1 n1", b" 3 1\r", b"\nA 1\r\nq\r\n"])
    assert [(p.offset, p.data, p.name) for p in pieces] == [
        (0, b"V 1 n1 3 1\r\n", "vote"), (12, b"A 1\r\n", "append"), (17, b"q\r\n", "other")]
    stream.max_length = 8
    assert stream.feed(b"A" * 9) == [Piece(20, b"A" * 9, None)] and not stream.synced


def test_libraft_streams_start_with_the_handshake():
    address = b"10.0.1.2:9001".ljust(16, b"\0")
    handshake = struct.pack("<QQQ", 1, 1, len(address)) + address
    vote = struct.pack("<QQ", wire.REQUEST_VOTE, 40) + struct.pack("<QQQQQ", 2, 1, 7, 1, 0)
    pieces = fed(stream_factory(LIBRAFT)(), [handshake[:10], handshake[10:] + vote[:20], vote[20:]])
    assert [(p.offset, p.name) for p in pieces] == [(0, "handshake"), (len(handshake), "request-vote")]


def test_a_stream_holds_a_message_up_to_its_formats_bound():
    # a stream keeps a message whole until its last byte, so it takes the length field's
    # max as its bound (a flow skips bodies and needs none); other framings get the default
    big = parse_messages({"length": {"offset": 0, "size": 4, "header": 4, "max": 64 << 20}, "type": {}}, "t")
    assert stream_factory(big)().max_length == 64 << 20 > DEFAULT_MAX_LENGTH
    assert stream_factory(LIBRAFT)().max_length == stream_factory(LINES)().max_length == DEFAULT_MAX_LENGTH


class RaisingFramer:
    """A fake framer with a bug: it raises on every message."""

    peek = 4

    def cut(self, head: bytes, first: bool):
        raise ValueError("bug")


def test_a_framer_that_raises_costs_the_stream_its_framing_not_the_gateway(monkeypatch):
    import sys
    import types

    module = types.ModuleType("fake_raising_framer")
    module.FRAMER = RaisingFramer()
    monkeypatch.setitem(sys.modules, "fake_raising_framer", module)
    fmt = parse_messages({"framer": "fake_raising_framer:FRAMER"}, "t")
    stream = stream_factory(fmt)()
    assert stream.feed(b"abcdef") == [Piece(0, b"abcdef", None)] and not stream.synced
