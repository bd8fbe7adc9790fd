"""The shared-memory event ring: creating it, and reading it (llvm-pass/RING.md).

The observer creates the ring (`create_ring`) before it starts the SUT with MALLORY_SHM set
to the ring's name; the instrumented program's runtime only ever opens an existing ring.
A `RingReader` keeps its own cursor, so it never blocks writers: events it did not read
before writers lapped it, slots overwritten while it read them, and torn slots are all
counted in `lost`, never returned.

Pure Python (the stdlib's memoryview and struct), no numpy: the reader runs in every node's
observer, whose resident set numpy alone would grow by ~21 MB (its shared libraries and
module objects), half of what the observer may use. The ring's words are read as native
u64s: the ring assumes x86-64 (little-endian, TSO), as RING.md says.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import time
from array import array
from collections.abc import Iterator
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

from mallory.errors import MalloryError
from mallory.timeline.event import KIND_BY_VALUE, Event

MAGIC = int.from_bytes(b"MLRYRING", "little")
VERSION = 1
HEADER_SIZE = 128
SLOT_SIZE = 32
DEFAULT_CAPACITY = 1 << 20
SHM_DIR = "/dev/shm"

# The header (RING.md "Header"): the creator's first four u64 words, then the shared fields'
# u64 word indices.
_HEADER = struct.Struct("<4Q")  # magic, version | slot size << 32, capacity, header size | flags << 32
_W_WRITER_DROPS, _W_READER_CURSOR, _W_READER_LOST, _W_WRITE_COUNTER = 4, 5, 6, 8

#: One slot (RING.md "Slot"): ts, id, kind, check, stamp.
SLOT_FORMAT = "<QQIIQ"
_SLOT = struct.Struct(SLOT_FORMAT)
_WORDS_PER_SLOT = SLOT_SIZE // 8
_STAMP_WORD = 3  # the stamp's u64 word in its slot
# Positions classified at once: one observer cut's worth (MAX_BATCH_EVENTS), so a poll's
# copies (256 KiB of slots, three lists of stamps) stay small.
_CHUNK = 1 << 13
# Consumed slots are given back to the kernel (see RingReader._release_consumed) this many at a
# time: 256 KiB, one madvise call per 8192 events.
_RELEASE_SLOTS = 1 << 13
# A read fault maps the page cache's pages around it too (the kernel's fault-around, 64 KiB),
# behind the cursor as well: each release starts that far back, to take those again.
_FAULT_AROUND = 1 << 16

_U64 = 0xFFFF_FFFF_FFFF_FFFF
_CHECK_MUL = 0x9E3779B97F4A7C15


def slot_check(ts: int, ident: int, kind: int, pos: int) -> int:
    """mallory_slot_check() of mallory_ring.h for one slot (u64 arithmetic on Python ints).
    `RingReader._read` inlines the same expression in its hot loop."""
    return ((ts ^ (ident << 21 & _U64) ^ ident >> 43 ^ kind << 32 ^ pos) * _CHECK_MUL & _U64) >> 32


def shm_path(name: str) -> str:
    """/dev/shm path of a POSIX shm name ("mallory-n1" or "/mallory-n1")."""
    bare = name[1:] if name.startswith("/") else name
    if not bare or "/" in bare or bare in (".", ".."):
        raise MalloryError(f"invalid shared-memory name {name!r}: one path component, like 'mallory-n1'")
    return os.path.join(SHM_DIR, bare)


def create_ring(name: str, capacity: int = DEFAULT_CAPACITY, *, exist_ok: bool = False, mode: int = 0o600) -> str:
    """Create (atomically: a fully written header or nothing) the ring `name`; returns its path."""
    if capacity < 2 or capacity & (capacity - 1):
        raise MalloryError(f"ring capacity must be a power of two >= 2, got {capacity}")
    path = shm_path(name)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
    try:
        os.ftruncate(fd, HEADER_SIZE + capacity * SLOT_SIZE)
        header = _HEADER.pack(MAGIC, VERSION | SLOT_SIZE << 32, capacity, HEADER_SIZE)
        os.pwrite(fd, header.ljust(HEADER_SIZE, b"\0"), 0)
        if exist_ok:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise MalloryError(f"shared-memory ring {name!r} already exists ({path})") from None
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


def unlink_ring(name: str, *, missing_ok: bool = True) -> None:
    """Remove the ring from /dev/shm (mappings already open stay valid until closed)."""
    try:
        os.unlink(shm_path(name))
    except FileNotFoundError:
        if not missing_ok:
            raise MalloryError(f"no shared-memory ring named {name!r}") from None


@contextlib.contextmanager
def ring(name: str, capacity: int = DEFAULT_CAPACITY) -> Iterator[str]:
    """A ring that exists for the duration of the block, then is unlinked."""
    path = create_ring(name, capacity)
    try:
        yield path
    finally:
        unlink_ring(name)


class PollResult(NamedTuple):
    """events: one (ts, id, kind, pos) tuple of ints an event, in ring (claim) order, which
    is not ts order; pos is the event's ring position. The kind is the slot's raw value
    (`events_of` skips kinds it does not know). lost: events lost since the previous poll."""

    events: list[tuple[int, int, int, int]]
    lost: int


class RingReader:
    """Reads new events from a ring since its own cursor (one reader per ring).

    poll() -> ((ts, id, kind, pos) tuples, lost since last poll); poll_events() -> [Event].
    lost_total counts every position not returned (laps, overwrites, torn slots, stalls;
    writer_drops are among them); torn_total the torn ones; complete_until_ns bounds the
    ts of every event not returned yet (see RING.md "Completeness"); truncated says that
    the last poll stopped at its `max_events` with more written behind them.

    start: "beginning" (position 0: events before attaching count as lost if lapped) or
           "now" (only events written from now on).
    stall_timeout: a position claimed but still unwritten after this many seconds (its
           writer died mid-hook) is counted lost so the reader does not wait forever.
    """

    def __init__(self, shm_name: str, node: str = "", *, start: str = "beginning", stall_timeout: float = 0.5) -> None:
        if start not in ("now", "beginning"):
            raise ValueError(f"start must be 'beginning' or 'now', got {start!r}")
        self.name = shm_name
        self.node = node
        self.stall_timeout = stall_timeout
        path = shm_path(shm_name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise MalloryError(f"no shared-memory ring named {shm_name!r} ({path})") from None
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_SIZE:
                raise MalloryError(f"{path}: {size} bytes, too small for a ring header")
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._hdr = memoryview(self._mm)[:HEADER_SIZE].cast("Q")
        magic, version_slot, capacity, header_flags = _HEADER.unpack_from(self._mm)
        problem = None
        if magic != MAGIC:
            problem = f"bad magic {magic:#x}"
        elif version_slot & 0xFFFFFFFF != VERSION or version_slot >> 32 != SLOT_SIZE:
            problem = f"unsupported version/slot size {version_slot & 0xFFFFFFFF}/{version_slot >> 32}"
        elif header_flags & 0xFFFFFFFF != HEADER_SIZE or capacity < 2 or capacity & (capacity - 1):
            problem = f"bad header size or capacity {capacity}"
        elif HEADER_SIZE + capacity * SLOT_SIZE > size:
            problem = f"capacity {capacity} does not fit in {size} bytes"
        if problem:
            self.close()
            raise MalloryError(f"{path}: not a Mallory ring v{VERSION}: {problem}")
        self.capacity = capacity
        self._mask = capacity - 1
        self._slots = memoryview(self._mm)[HEADER_SIZE:HEADER_SIZE + capacity * SLOT_SIZE]
        self._words = self._slots.cast("Q")
        read_ns = time.monotonic_ns()
        self.cursor = self.write_counter if start == "now" else 0
        self.lost_total = 0
        self.torn_total = 0
        self._stall: tuple[int, float] | None = None
        self.truncated = False
        #: Every event this reader has not returned yet has ts >= this (CLOCK_MONOTONIC ns).
        self.complete_until_ns = 0
        # (write_counter, clock read just before it) of recent polls, oldest first.
        self._reads: list[tuple[int, int]] = [(self.cursor, read_ns)] if start == "now" else []
        self._note_read(self.cursor)
        self._released = self.cursor  # slots before this position are out of our resident set

    @property
    def write_counter(self) -> int:
        return self._hdr[_W_WRITE_COUNTER]

    @property
    def writer_drops(self) -> int:
        """Events writers abandoned; the reader already counts each of them in `lost_total`."""
        return self._hdr[_W_WRITER_DROPS]

    @property
    def published(self) -> tuple[int, int]:
        """(reader_cursor, reader_lost) as the header shows them to other tools."""
        return self._hdr[_W_READER_CURSOR], self._hdr[_W_READER_LOST]

    def poll(self, max_events: int | None = None) -> PollResult:
        """New events since the cursor (at most `max_events`), and how many were lost."""
        lost = 0
        read_ns = time.monotonic_ns()
        written = self.write_counter
        self._reads.append((written, read_ns))
        if written - self.cursor > self.capacity:
            lost += written - self.capacity - self.cursor
            self.cursor = written - self.capacity
        budget = written - self.cursor
        truncated = max_events is not None and max_events < budget
        if truncated:
            budget = max_events
        out: list[tuple[int, int, int, int]] = []
        while budget > 0:
            start = self.cursor & self._mask
            n = min(budget, _CHUNK, self.capacity - start)
            kept, decided = self._read(self.cursor, start, n, out)
            lost += decided - kept
            self.cursor += decided
            budget -= decided
            if decided < n:
                if not self._stalled(self.cursor):
                    break
                lost += 1  # the stalled position's writer never finished: give up on it
                self.cursor += 1
                budget -= 1
        self.truncated = truncated and budget == 0  # not when a pending slot stopped it first
        self._note_read(self.cursor)
        self.lost_total += lost
        self._hdr[_W_READER_CURSOR] = self.cursor
        self._hdr[_W_READER_LOST] = self.lost_total
        self._release_consumed()
        return PollResult(out, lost)

    def _release_consumed(self) -> None:
        """Drop the pages of slots behind the cursor from this process's resident set.

        Without this a reader's RSS grows by every ring page it has read, up to the whole
        ring (32 MiB by default) after one lap, though it never reads those slots again. On
        a shared tmpfs mapping MADV_DONTNEED only unmaps: the data stays in the ring (the
        writers' mappings keep it), and a page read again after the writer's next lap is
        mapped back on that read. The header's page (which also holds the first slots) is
        never released."""
        self._released = max(self._released, self.cursor - self.capacity)
        while self.cursor - self._released >= _RELEASE_SLOTS:
            first = self._released & self._mask
            n = min(self.cursor - self._released, self.capacity - first)
            lo = HEADER_SIZE + first * SLOT_SIZE
            hi = lo + n * SLOT_SIZE
            lo_page = max(mmap.PAGESIZE, -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE - _FAULT_AROUND)
            # Round the end down to a page unless the lap ends there (the mapping's last page).
            lap_end = first + n == self.capacity
            hi_page = hi if lap_end else hi // mmap.PAGESIZE * mmap.PAGESIZE
            if hi_page > lo_page:
                self._mm.madvise(mmap.MADV_DONTNEED, lo_page, hi_page - lo_page)
            # Up to the page boundary: the slots of a page cut short are released next time.
            self._released += n if lap_end else (hi_page - HEADER_SIZE) // SLOT_SIZE - first

    def _note_read(self, cursor: int) -> None:
        """Advance `complete_until_ns`. Writers read the clock after claiming a position, so a
        position claimed after a counter read that did not include it has ts >= that read's
        clock: the latest read whose counter was <= the first unreturned position bounds every
        event still to come."""
        done = [r for r in self._reads if r[0] <= cursor]
        if done:
            self.complete_until_ns = max(self.complete_until_ns, done[-1][1])
            self._reads = done[-1:] + [r for r in self._reads if r[0] > cursor]

    def _read(self, first: int, start: int, n: int, out: list[tuple[int, int, int, int]]) -> tuple[int, int]:
        """Classify positions [first, first+n) (ring slots [start, start+n)), appending whole
        events to `out` as (ts, id, kind, pos). Returns (kept, decided): positions before the
        first pending one are decided; decided - kept of them were lost."""
        # Seqlock-style read in three passes: every stamp, then every payload, then every
        # stamp again (x86-64 keeps loads in order). A slot whose two stamps agree on its
        # position was not rewritten while its payload was copied.
        stamps = slice(start * _WORDS_PER_SLOT + _STAMP_WORD, (start + n) * _WORDS_PER_SLOT, _WORDS_PER_SLOT)
        before = self._words[stamps].tolist()
        chunk = self._slots[start * SLOT_SIZE:(start + n) * SLOT_SIZE].tobytes()
        after = self._words[stamps].tolist()
        want = list(range((first + 1) << 1, (first + n + 1) << 1, 2))  # (p+1) << 1: finished by p
        if before == want and after == want:
            # Every slot is whole or torn: only the checks decide (slot_check, inlined).
            got = [(ts, ident, kind, p) for p, (ts, ident, kind, check, _) in enumerate(_SLOT.iter_unpack(chunk), first)
                   if check == ((ts ^ (ident << 21 & _U64) ^ ident >> 43 ^ kind << 32 ^ p) * _CHECK_MUL & _U64) >> 32]
            out += got
            self.torn_total += n - len(got)
            return len(got), n
        kept = 0
        for i in range(n):
            p, w, b, a = first + i, want[i], before[i], after[i]
            if b == w and a == w:
                ts, ident, kind, check, _ = _SLOT.unpack_from(chunk, i * SLOT_SIZE)
                if check == slot_check(ts, ident, kind, p):
                    out.append((ts, ident, kind, p))
                    kept += 1
                else:
                    self.torn_total += 1
            elif max(b, a) >> 1 <= p + 1:  # not overwritten by a newer lap: its writer is not done
                return kept, i
        return kept, n

    def _stalled(self, position: int) -> bool:
        now = time.monotonic()
        if self._stall is None or self._stall[0] != position:
            self._stall = (position, now)
            return False
        return now - self._stall[1] >= self.stall_timeout

    def poll_events(self, max_events: int | None = None) -> list[Event]:
        """`poll` as `Event`s of this reader's node (slots of unknown kind are skipped)."""
        return events_of(self.poll(max_events).events, self.node)

    def close(self) -> None:
        for attr in ("_words", "_slots", "_hdr"):  # the mmap cannot close while views of it exist
            if hasattr(self, attr):
                getattr(self, attr).release()
                delattr(self, attr)
        if getattr(self, "_mm", None) is not None:
            self._mm.close()
            self._mm = None

    def __enter__(self) -> RingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def events_of(events: list[tuple[int, int, int, int]], node: str) -> list[Event]:
    """(ts, id, kind, pos) tuples (`PollResult.events`) as `Event`s of `node`, in their order
    (those of unknown kind are skipped)."""
    # Event._make skips the NamedTuple's Python-level __new__ (it is hot) and still checks
    # the field count, so a field added to Event fails here, loudly
    kinds, make = KIND_BY_VALUE, Event._make
    return [make((node, kinds[k], ts, ident, "")) for ts, ident, k, _ in events if k in kinds]


_TS = itemgetter(0)


class RingBacklog:
    """What an observer has read from its ring and not yet put in a batch.

    A batch holds only events older than its until_ns, and at most MAX_BATCH_EVENTS of
    them (mallory/observer/observer.py), so a cut does not always send all it read: the rest
    waits here for a later cut. A cut reads at most MAX_BATCH_EVENTS, but while a burst is
    read in such steps the reader's `complete_until_ns` stays where it was until the cursor
    passes the counter the first step read (RING.md "Completeness"), so the whole burst can
    wait here, up to the ring's capacity. Hence the waiting events are kept packed, as four
    u64 words each (ts, id, kind, pos: 32 bytes an event), not as tuples (~180 bytes).
    They come in ring order, which is not ts order (a writer reads the clock after claiming
    its slot); `take_before` hands them out by ts.
    """

    def __init__(self, reader: RingReader) -> None:
        self.reader = reader
        self._rows = array("Q")

    def __len__(self) -> int:
        return len(self._rows) // 4

    @property
    def complete_until_ns(self) -> int:
        """Every event neither read nor waiting here has ts >= this (RingReader's bound)."""
        return self.reader.complete_until_ns

    @property
    def truncated(self) -> bool:
        """The last `read` stopped at its limit with more written behind it."""
        return self.reader.truncated

    def read(self, max_events: int) -> None:
        """Poll the ring for up to `max_events` more events (RingReader.poll)."""
        self._rows.extend(chain.from_iterable(self.reader.poll(max_events).events))

    def ts_before(self, until_ns: int) -> list[int]:
        """The ts of the waiting events older than `until_ns`, in no particular order."""
        return [ts for ts in self._rows[0::4] if ts < until_ns]

    def take_before(self, until_ns: int) -> list[Event]:
        """Remove the waiting events older than `until_ns`; they come back as `Event`s of the
        reader's node, in ts order (ring order among equal ts)."""
        rows = self._rows
        if not rows or min(rows[0::4]) >= until_ns:
            return []
        # zip of one iterator four times: the (ts, id, kind, pos) of each waiting event
        words = iter(rows)
        taken = [row for row in zip(words, words, words, words) if row[0] < until_ns]
        words = iter(rows)
        self._rows = array("Q", chain.from_iterable(row for row in zip(words, words, words, words) if row[0] >= until_ns))
        taken.sort(key=_TS)  # stable
        return events_of(taken, self.reader.node)

    def discard(self) -> int:
        """Forget every waiting event; how many there were."""
        count, self._rows = len(self), array("Q")
        return count
