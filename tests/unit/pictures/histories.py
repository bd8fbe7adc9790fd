"""Timed histories for the pictures' tests, the campaign checks' tests and the report's
fixture campaigns: ops with Jepsen's :time, nemesis ops marking a fault, and a bug.

`failover_history`: a list-append history of the root cause `make demo` finds in Redis: a
master acknowledges appends, is killed, and the replica promoted in its place never had
them; latencies climb while the fault lasts. `stale_read_history`: the same loss seen
only by a reader that came after (a real-time anomaly). `register_history`: a register
whose read returns a value overwritten before it began.
"""

from __future__ import annotations

from typing import Any

from mallory.history.edn import Keyword
from mallory.history.ops import NEMESIS, Op

MS = 1_000_000


class TimedHistory:
    """Ops added in any order with their times (ms), sorted into a history by `ops()`."""

    def __init__(self) -> None:
        self._events: list[tuple[float, int, Any, str, Any, Any]] = []

    def _add(self, at_ms: float, process: Any, typ: str, f: Any, value: Any) -> None:
        self._events.append((at_ms, len(self._events), process, typ, f, value))

    def call(self, process: int, f: str, start_ms: float, end_ms: float | None, invoke: Any, done: Any = None,
             typ: str = "ok") -> TimedHistory:
        """An op of `process` from start_ms to end_ms (None: never completes)."""
        self._add(start_ms, process, "invoke", f, invoke)
        if end_ms is not None:
            self._add(end_ms, process, typ, f, invoke if done is None else done)
        return self

    def txn(self, process: int, start_ms: float, end_ms: float | None, *mops: list, typ: str = "ok") -> TimedHistory:
        """A list-append transaction; a read micro-op is [r k [values]] (its invoke reads nil)."""
        invoke = [[Keyword(m[0]), m[1], None if m[0] == "r" else m[2]] for m in mops]
        done = [[Keyword(m[0]), m[1], m[2]] for m in mops] if typ == "ok" else invoke
        return self.call(process, "txn", start_ms, end_ms, invoke, done, typ)

    def nemesis(self, f: str, at_ms: float) -> TimedHistory:
        self._add(at_ms, NEMESIS, "info", f, None)
        return self

    def ops(self) -> list[Op]:
        ordered = sorted(self._events, key=lambda e: (e[0], e[1]))
        return [Op(i, p, Keyword(typ), Keyword(f), value, int(at * MS)) for i, (at, _, p, typ, f, value) in enumerate(ordered)]


def background(h: TimedHistory, processes: int = 4, until_ms: float = 12_000, fault=(4_000, 8_000)) -> int:
    """Load that finds nothing: each process appends to and reads its own key, every 100
    ms, slow while the fault lasts (a few time out: :info); returns how many ops."""
    count = 0
    for p in range(processes):
        t, n, written = 10.0 * p, 0, []
        while t < until_ms:
            slow = fault[0] <= t < fault[1]
            latency = (300 + 97 * (n % 7)) if slow else (3 + n % 9)
            key = 100 + p
            if slow and n % 5 == 4:
                h.txn(p, t, t + 1000, ["r", key, None], typ="info")  # a timeout
                latency = 1000
            elif n % 3 == 2:
                h.txn(p, t, t + latency, ["r", key, list(written)])
            else:
                written.append(n)
                h.txn(p, t, t + latency, ["append", key, n])
            t += latency + 100
            n += 1
            count += 1
    return count


def failover_history() -> list[Op]:
    """Appends to key 1 acknowledged before a kill at 4 s are lost: a read saw [1 2 3],
    after the failover the list goes on [1 2 4 5]; plus a write-skew pair on keys 2 and 3."""
    h = TimedHistory()
    background(h)
    h.nemesis("kill:primaries", 4_000).nemesis("heal", 8_000)
    h.txn(10, 1_000, 1_010, ["append", 1, 1]).txn(10, 1_100, 1_110, ["append", 1, 2])
    h.txn(11, 3_000, 3_012, ["append", 1, 3], ["r", 2, []])
    h.txn(12, 3_900, 3_911, ["r", 1, [1, 2, 3]], ["append", 3, 1])
    h.txn(13, 3_950, 3_960, ["r", 3, []], ["append", 2, 1])
    h.txn(10, 8_500, 8_511, ["append", 1, 4]).txn(11, 9_000, 9_012, ["append", 1, 5])
    h.txn(12, 9_500, 9_510, ["r", 1, [1, 2, 4, 5]], ["r", 2, [1]], ["r", 3, [1]])
    return h.ops()


def stale_read_history() -> list[Op]:
    """An append acknowledged before the kill, then a read after it that misses it."""
    h = TimedHistory()
    background(h)
    h.nemesis("kill:primaries", 4_000).nemesis("heal", 8_000)
    h.txn(10, 3_000, 3_010, ["append", 7, 1])
    h.txn(11, 8_500, 8_510, ["r", 7, []])
    return h.ops()


def register_history() -> list[Op]:
    """Writes 1, 2, 3 one after another, then a read of 1: nowhere to place it. Beside
    them, other processes read and write concurrently (linearizable on their own)."""
    h = TimedHistory()
    h.nemesis("partition:majority", 300).nemesis("heal", 900)
    h.call(0, "write", 0, 10, 1).call(0, "write", 100, 110, 2).call(1, "read", 120, 130, None, 2)
    h.call(2, "write", 200, 215, 3).call(1, "read", 400, 410, None, 3)
    h.call(3, "write", 500, 900, 4, typ="info")  # timed out: may have happened, or not
    h.call(2, "read", 950, 960, None, 1)
    return h.ops()
