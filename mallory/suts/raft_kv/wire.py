"""libraft v0.15.0's TCP wire format (the uv transport raft-kv uses), as a framer for the
observer (`LIBRAFT_UV`, a `Cutter` of mallory/observer/framing.py; suts/raft/raft.toml
names it in its `[messages]` section).

A server sends its messages on a connection it opened to the peer's raft port; the peer
never writes back on it (replies go on the peer's own connection). Every integer is a
little-endian u64 unless said otherwise (src/byte.h: "network byte order (little endian)").

    handshake, once at the connection's start (src/uv_tcp_connect.c:39-57, read back by
    src/uv_tcp_listen.c:44-62):
        protocol (UV__TCP_HANDSHAKE_PROTOCOL = 1, src/uv_tcp.h), server id,
        address length L (strlen + 1 padded to 8), L bytes of NUL-terminated address
    then messages (src/uv_encoding.c:uvEncodeMessage, read back by src/uv_recv.c):
        preamble: type (RAFT_IO_*, /usr/include/raft.h), header length H
        header (H bytes, by type):
          append entries (1)         term, prev index, prev term, commit, n entries, then n
                                     16-byte entry headers (term u64, type u8, 3 unused,
                                     data length u32); H = 48 + 16 n (sizeofAppendEntries
                                     counts a leader id the encoder never writes)
          append entries result (2)  term, rejected, last log index: H = 24
          request vote (3)           term, candidate id, last index, last term, flags: H = 40
                                     (32 from servers before leadership transfer)
          request vote result (4)    term, vote granted, flags: H = 24 (16 before pre-vote)
          install snapshot (5)       term, last index, last term, conf index, conf length C,
                                     C bytes of configuration, data length: H = 56 + C
          timeout now (6)            term, last log index, last log term: H = 24
        payload: append entries: the entries' data, back to back (their lengths summed, as
        uvDecodeMessage does); install snapshot: the snapshot's data; none otherwise.

Names are libraft's struct names (raft_append_entries...) in kebab case, plus "handshake".
Every header field that has one expected value is checked, so a guess at a message start
after lost sync (mallory/observer/framing.py) is refused unless it reads as libraft's.
"""

from __future__ import annotations

import struct

PREAMBLE = 16
HANDSHAKE_PROTOCOL = 1
#: the longest address a handshake is believed to carry (raft-kv's are "ip:port")
MAX_ADDRESS = 1024
ENTRY_TYPES = (1, 2, 3)  # RAFT_COMMAND, RAFT_BARRIER, RAFT_CHANGE

APPEND_ENTRIES, APPEND_ENTRIES_RESULT, REQUEST_VOTE, REQUEST_VOTE_RESULT, INSTALL_SNAPSHOT, TIMEOUT_NOW = range(1, 7)
NAMES = {
    APPEND_ENTRIES: "append-entries",
    APPEND_ENTRIES_RESULT: "append-entries-result",
    REQUEST_VOTE: "request-vote",
    REQUEST_VOTE_RESULT: "request-vote-result",
    INSTALL_SNAPSHOT: "install-snapshot",
    TIMEOUT_NOW: "timeout-now",
}
HANDSHAKE = "handshake"
#: header lengths of the fixed-size messages (each version libraft 0.15 still decodes)
FIXED_HEADERS = {
    APPEND_ENTRIES_RESULT: (24,),
    REQUEST_VOTE: (40, 32),
    REQUEST_VOTE_RESULT: (24, 16),
    TIMEOUT_NOW: (24,),
}

_U64 = struct.Struct("<Q")
_TWO = struct.Struct("<QQ")
_THREE = struct.Struct("<QQQ")
_ENTRY = struct.Struct("<QB3xI")


class LibraftUvFramer:
    """The `Cutter` of libraft's uv TCP streams (see the module docstring)."""

    peek = PREAMBLE
    max_header = 60 << 10  # below the framer's MAX_HEAD: a longer header is taken as lost sync

    def cut(self, head: bytes, first: bool) -> tuple[int, str] | int | None:
        if first:
            if len(head) < 24:
                return 24
            protocol, _server_id, address_len = _THREE.unpack_from(head)
            if protocol != HANDSHAKE_PROTOCOL or address_len % 8 or not 8 <= address_len <= MAX_ADDRESS:
                return None
            return 24 + address_len, HANDSHAKE
        if len(head) < PREAMBLE:
            return PREAMBLE
        kind, header = _TWO.unpack_from(head)
        name = NAMES.get(kind)
        if name is None or header > self.max_header:
            return None
        fixed = FIXED_HEADERS.get(kind)
        if fixed is not None:
            return (PREAMBLE + header, name) if header in fixed else None
        # append entries: 48 + 16 n; install snapshot: 56 + a configuration padded to 8
        if header < 48 or header % (16 if kind == APPEND_ENTRIES else 8) or (kind == INSTALL_SNAPSHOT and header < 56):
            return None
        if len(head) < PREAMBLE + 40:  # up to the entry count / the configuration's length
            return PREAMBLE + 40
        if kind == APPEND_ENTRIES:
            n = _U64.unpack_from(head, PREAMBLE + 32)[0]
            if header != 48 + 16 * n:
                return None
            if len(head) < PREAMBLE + header:
                return PREAMBLE + header
            payload = 0
            for i in range(n):
                _term, entry_type, length = _ENTRY.unpack_from(head, PREAMBLE + 40 + 16 * i)
                if entry_type not in ENTRY_TYPES:
                    return None
                payload += length
            return PREAMBLE + header + payload, name
        conf_len = _U64.unpack_from(head, PREAMBLE + 32)[0]  # install snapshot
        if header != 56 + conf_len:
            return None
        if len(head) < PREAMBLE + 48 + conf_len:
            return PREAMBLE + 48 + conf_len
        data_len = _U64.unpack_from(head, PREAMBLE + 40 + conf_len)[0]
        return PREAMBLE + header + data_len, name


#: what `[messages] framer = "mallory.suts.raft_kv.wire:LIBRAFT_UV"` names
LIBRAFT_UV = LibraftUvFramer()
