"""libraft's uv wire framer (mallory/suts/raft_kv/wire.py) on byte streams built exactly as
libraft v0.15.0 encodes them (canonical/raft, tag v0.15.0; line numbers of that tag). No
recorded raft-kv capture with whole payloads exists yet: these streams are built from the
encoder's source, field by field, and the framer is run through the observer's flow."""

from __future__ import annotations

import struct

import pytest

from mallory.harness.spec import load_spec
from mallory.observer.framing import LengthFlow, flow_factory
from mallory.observer.messages import PeerMessages
from mallory.suts.raft_kv import wire
from mallory.suts.raft_kv.adapter import DEFAULT_SPEC
from mallory.timeline.event import is_message_name


def u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)  # bytePut64: little endian (src/byte.h:49)


def handshake(server_id: int, address: str) -> bytes:
    """src/uv_tcp_connect.c:39-57: protocol 1 (src/uv_tcp.h:8), id, bytePad64(strlen + 1),
    the NUL-terminated address (the pad bytes are whatever malloc gave: not zero here)."""
    padded = (len(address) + 1 + 7) // 8 * 8
    return u64(1, server_id, padded) + address.encode() + b"\0" + b"\xa5" * (padded - len(address) - 1)


def message(kind: int, header: bytes, payload: bytes = b"", unwritten: int = 0) -> bytes:
    """src/uv_encoding.c:172-278: preamble type and header length (213-214), the header; the
    header length counts `unwritten` bytes the encoder never fills (a leader id in
    sizeofAppendEntries, 42-51, and sizeofInstallSnapshot, 60-71), then the payload bufs."""
    return u64(kind, len(header) + unwritten) + header + b"\x5a" * unwritten + payload


def request_vote(term: int, candidate: int, pre_vote: bool = False) -> bytes:
    # encodeRequestVote, src/uv_encoding.c:86-103: term, candidate id, last index, last term, flags
    return message(3, u64(term, candidate, 7, 2, 2 if pre_vote else 0))


def request_vote_result(term: int, granted: bool) -> bytes:
    # encodeRequestVoteResult, src/uv_encoding.c:105-118
    return message(4, u64(term, int(granted), 0))


def append_entries(term: int, entries: list[tuple[int, int, bytes]]) -> bytes:
    """encodeAppendEntries, src/uv_encoding.c:120-132: term, prev index, prev term, commit,
    then uvEncodeBatchHeader (281-305): n, and per entry term u64, type u8, 3 unused, length
    u32; the entries' buffers follow as the payload (uvEncodeMessage, 248-256)."""
    batch = u64(len(entries)) + b"".join(struct.pack("<QB3xI", t, kind, len(data)) for t, kind, data in entries)
    return message(1, u64(term, 4, 1, 3) + batch, b"".join(data for _, _, data in entries), unwritten=8)


def append_entries_result(term: int, rejected: int, last: int) -> bytes:
    # encodeAppendEntriesResult, src/uv_encoding.c:134-143
    return message(2, u64(term, rejected, last))


def configuration(servers: list[tuple[int, str, int]]) -> bytes:
    """configurationEncodeToBuf, src/configuration.c:237-255: format 1, n (unaligned), per
    server id, NUL-terminated address, role; padded to 8 (configurationEncodedSize, 214-235)."""
    out = b"\x01" + u64(len(servers)) + b"".join(u64(i) + a.encode() + b"\0" + bytes([r]) for i, a, r in servers)
    return out + b"\0" * (-len(out) % 8)


def install_snapshot(term: int, conf: bytes, data: bytes) -> bytes:
    """encodeInstallSnapshot, src/uv_encoding.c:145-161: term, last index, last term, conf
    index, conf length, conf, data length; the snapshot's data is the payload (258-261)."""
    return message(5, u64(term, 80, 3, 12, len(conf)) + conf + u64(len(data)), data, unwritten=8)


def timeout_now(term: int) -> bytes:
    # encodeTimeoutNow, src/uv_encoding.c:163-170
    return message(6, u64(term, 40, 3))


CONF = configuration([(11, "10.0.1.2:7001", 0), (12, "10.0.2.2:7001", 0), (13, "10.0.3.2:7001", 1)])
#: what n1 sends n2 on the connection it opened: every message type once, and entries whose
#: lengths are not multiples of 8 (libraft sums them unpadded: uvDecodeMessage, 486-490)
STREAM = [
    (handshake(11, "10.0.1.2:7001"), "handshake"),
    (request_vote(2, 11, pre_vote=True), "request-vote"),
    (request_vote_result(2, True), "request-vote-result"),
    (append_entries(2, []), "append-entries"),  # a heartbeat
    (append_entries(2, [(2, 1, b"PUT k v" + b"\0"), (2, 3, CONF), (2, 1, b"x" * 13)]), "append-entries"),
    (append_entries_result(2, 0, 7), "append-entries-result"),
    (install_snapshot(2, CONF, b"snapshot bytes " * 300), "install-snapshot"),
    (timeout_now(3), "timeout-now"),
    (append_entries(3, [(3, 2, b"")]), "append-entries"),  # a barrier, empty
]


def started() -> LengthFlow:
    flow = LengthFlow(wire.LIBRAFT_UV)
    assert flow.feed(999, b"", syn=True) == []
    return flow


def test_each_message_alone_is_cut_to_its_encoded_length_and_named():
    data = b"".join(m for m, _ in STREAM)
    flow = started()
    assert flow.feed(1000, data) == [name for _, name in STREAM]
    assert flow.skip == 0 and not flow.head  # ended exactly on the last message's end


@pytest.mark.parametrize("mss", [1, 7, 16, 100, 1448])
def test_any_segmentation_gives_each_name_once_where_its_header_completes(mss):
    data = b"".join(m for m, _ in STREAM)
    flow = started()
    names = []
    for at in range(0, len(data), mss):
        got = flow.feed(1000 + at, data[at : at + mss], push=at + mss >= len(data))
        assert got is not None
        names += got
    assert names == [name for _, name in STREAM]


def test_the_append_entries_header_is_read_to_its_last_entry_before_naming():
    ae = append_entries(2, [(2, 1, b"a" * 9), (2, 1, b"b" * 3)])
    assert wire.LIBRAFT_UV.cut(ae[:16], False) == 16 + 40  # up to the entry count
    assert wire.LIBRAFT_UV.cut(ae[:56], False) == 16 + 48 + 32  # the whole header
    assert wire.LIBRAFT_UV.cut(ae[:96], False) == (16 + 48 + 32 + 12, "append-entries")


def test_a_segment_past_a_gap_is_held_and_every_later_copy_reads_as_the_stream_does():
    data = b"".join(m for m, _ in STREAM[:6])
    names = [name for _, name in STREAM[:6]]
    flow = started()
    first = flow.feed(1000, data[:200])
    assert first == names[:4]  # the fifth, an append entries, starts at 200; its header ends at 311
    assert flow.feed(1300, data[300:]) is None  # past a gap holding that header: held, unknown
    assert flow.feed(1200, data[200:300]) == []  # fills the gap; the header completes in the held part
    assert flow.feed(1000, data[:200]) == first  # a retransmission
    assert flow.feed(1300, data[300:]) == names[4:]  # the held segment's late copy: from memory


def test_a_flow_met_mid_stream_resyncs_on_a_write_that_reads_as_librafts():
    flow = LengthFlow(wire.LIBRAFT_UV)
    big = append_entries(2, [(2, 1, b"e" * 3000)])
    # the observer starts inside the entry's data: the guess reads garbage and is refused
    assert flow.feed(5000, big[1000:2000], push=False) is None and not flow.synced
    assert flow.feed(6000, big[2000:], push=True) is None  # no write start before it
    assert flow.feed(6000 + len(big) - 2000, request_vote(3, 12) + timeout_now(3)) == ["request-vote", "timeout-now"]


def test_a_handshake_guessed_mid_stream_is_refused_and_a_message_where_a_handshake_is_due_too():
    hs = handshake(11, "10.0.1.2:7001")
    assert wire.LIBRAFT_UV.cut(hs, False) is None  # type 1 with a "header" of 11 bytes
    assert wire.LIBRAFT_UV.cut(request_vote(2, 11), True) is None  # protocol 3
    assert wire.LIBRAFT_UV.cut(hs, True) == (len(hs), "handshake")


@pytest.mark.parametrize("broken", [
    u64(7, 24) + u64(0, 0, 0),  # no such type
    u64(1, 40) + bytes(40),  # append entries shorter than its fixed fields
    u64(2, 32) + u64(0, 0, 0, 0),  # append entries result of the wrong size
    u64(1, 64) + u64(1, 1, 1, 1, 3) + bytes(48),  # 3 entries in a header sized for 1
    u64(1, 64) + u64(1, 1, 1, 1, 1) + struct.pack("<QB3xI", 1, 9, 4) + bytes(8),  # entry type 9
    u64(5, 72) + u64(1, 1, 1, 1, 24),  # install snapshot whose header does not hold its conf
    u64(3, 1 << 40),  # a header past any credible size
])
def test_headers_libraft_would_not_have_written_are_refused(broken):
    assert wire.LIBRAFT_UV.cut(broken, False) is None


def test_raft_kv_declares_the_libraft_framer_on_its_raft_port():
    spec = load_spec(DEFAULT_SPEC)
    assert spec.messages is not None and spec.messages.framer == "mallory.suts.raft_kv.wire:LIBRAFT_UV"
    assert spec.messages.ports == ("peer",) and spec.ports["peer"] != spec.ports["client"]
    flow = flow_factory(spec.messages)()
    assert isinstance(flow, LengthFlow) and flow.cutter is wire.LIBRAFT_UV
    assert all(is_message_name(n) for n in [*wire.NAMES.values(), wire.HANDSHAKE])
    assert PeerMessages(spec.messages, (spec.ports["peer"],)).ports == (7001,)
