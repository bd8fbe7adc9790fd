"""The list-append analyser (after Elle's elle.list-append).

Each key holds a list; a transaction appends unique elements ([:append k e]) and reads
whole lists ([:r k [e ...]]). Because every read shows the order of every append before
it, the version order of a key is its longest read (every other read must be a prefix of
it, else incompatible-order), followed by the appends no read saw.

From the transactions alone: internal inconsistency, duplicate elements, future reads,
incompatible orders, dirty updates, aborted reads (G1a), garbage reads, intermediate
reads (G1b) and lost updates. Edges: ww between consecutive appends of the version order,
wr from the append a read ends with to the read, rw from a read to the append that
follows what it saw.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.ops import Call
from mallory.oracles.depgraph import RW, WR, WW, DepGraph
from mallory.oracles.txn import (
    Found,
    Txn,
    TxnAnalysis,
    hashable,
    key_text,
    mops_text,
    op_ref,
)


class ListAppendAnalysis(TxnAnalysis):
    """A list-append history: micro-ops [:append k e] and [:r k [e ...]]; see the module doc."""

    KIND = "list-append"
    WRITE = "append"

    @staticmethod
    def read_value(value: Any, where: str) -> list[Any] | None:
        """A read's list, its elements hashable; nil (a key never written) stays None."""
        if value is not None and not isinstance(value, (list, tuple)):
            raise MalloryError(f"{where}: a list-append read must return a list, got {value!r}")
        return None if value is None else [hashable(e) for e in value]

    def __init__(self, txns: list[Txn], failed: list[Txn], found: Found) -> None:
        self.txns = txns
        self.writer: dict[Hashable, dict[Any, int]] = defaultdict(dict)
        self.failed_writer: dict[Hashable, dict[Any, Call]] = defaultdict(dict)
        self.intermediate: dict[Hashable, set[Any]] = defaultdict(set)
        self.appends: list[dict[Hashable, list[Any]]] = []
        self.ext_reads: list[dict[Hashable, list[Any]]] = []
        self.longest: dict[Hashable, list[Any]] = {}
        self.unobserved: dict[Hashable, list[Any]] = {}
        self.incompatible: set[tuple[int, Hashable]] = set()
        self.found = found
        for ft in failed:
            for f, k, v in ft.mops:
                if f == "append":
                    self.failed_writer[k][v] = ft.call
        for t in txns:
            self._scan(t)
        self._versions()
        self._intermediate_and_lost()

    def _scan(self, t: Txn) -> None:
        appends: dict[Hashable, list[Any]] = {}
        ext: dict[Hashable, list[Any]] = {}
        touched: set[Hashable] = set()
        ok = t.status == "ok"
        for f, k, v in t.mops:
            if f == "append":
                appends.setdefault(k, []).append(v)
                touched.add(k)
            else:
                if ok and k not in touched:
                    ext[k] = [] if v is None else v
                touched.add(k)
        for k, elems in appends.items():
            w = self.writer[k]
            for e in elems:
                w[e] = t.node
            if len(elems) > 1:
                self.intermediate[k].update(elems[:-1])
        self.appends.append(appends)
        self.ext_reads.append(ext)
        if ok:
            self._internal(t, appends)

    def _internal(self, t: Txn, appends: dict[Hashable, list[Any]]) -> None:
        known: dict[Hashable, list[Any]] = {}
        suffix: dict[Hashable, list[Any]] = {}
        seen: dict[Hashable, set[Any]] = {}
        for i, (f, k, v) in enumerate(t.mops):
            if f == "append":
                if k in known:
                    known[k].append(v)
                else:
                    suffix.setdefault(k, []).append(v)
                seen.setdefault(k, set()).add(v)
                continue
            val = [] if v is None else v
            if len(set(map(hashable, val))) != len(val):
                self.found.add("duplicate-elements", {
                    "op": op_ref(t), "key": key_text(k), "read": mops_text(val),
                    "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, which holds an element twice"})
            later = set(appends.get(k, ())) - seen.get(k, set())
            if later and later & set(map(hashable, val)):
                self.found.add("future-read", {
                    "op": op_ref(t), "key": key_text(k), "read": mops_text(val),
                    "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, including its own later append"})
            if k in known:
                if val != known[k]:
                    self._internal_case(t, i, k, val, mops_text(known[k]))
            elif k in suffix:
                s = suffix[k]
                if val[-len(s):] != s:
                    self._internal_case(t, i, k, val, "[... " + " ".join(edn.dumps(e) for e in s) + "]")
            known[k] = list(val)

    def _internal_case(self, t: Txn, i: int, k: Any, val: list[Any], expected: str) -> None:
        self.found.add("internal", {
            "op": op_ref(t), "mop": i, "key": key_text(k), "read": mops_text(val), "expected": expected,
            "text": f"T{t.node} read {key_text(k)} = {mops_text(val)} but its own earlier micro-ops imply {expected}"})

    def _all_reads(self) -> Iterable[tuple[Txn, Hashable, list[Any]]]:
        for t in self.txns:
            if t.status != "ok":
                continue
            for f, k, v in t.mops:
                if f == "r":
                    yield t, k, ([] if v is None else v)

    def _versions(self) -> None:
        for _, k, val in self._all_reads():
            cur = self.longest.get(k)
            if cur is None or len(val) > len(cur):
                self.longest[k] = val
        for k in self.writer:
            self.longest.setdefault(k, [])
        bad_keys: dict[Hashable, list[tuple[Txn, list[Any]]]] = defaultdict(list)
        for t, k, val in self._all_reads():
            longest = self.longest[k]
            if val is not longest and longest[: len(val)] != val:
                self.incompatible.add((t.node, k))
                bad_keys[k].append((t, val))
        for k, reads in bad_keys.items():
            seen_vals = set()
            for t, val in reads:
                tv = tuple(map(hashable, val))
                if tv in seen_vals:
                    continue
                seen_vals.add(tv)
                self.found.add("incompatible-order", {
                    "key": key_text(k), "op": op_ref(t), "read": mops_text(val), "longest": mops_text(self.longest[k]),
                    "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, which is not a prefix of the longest "
                            f"read {mops_text(self.longest[k])}: the two could not come from one order"})
        for k, longest in self.longest.items():
            observed = set(map(hashable, longest))
            self.unobserved[k] = [e for e in self.writer[k] if e not in observed]
            self._check_versions(k, longest)

    def _check_versions(self, k: Hashable, longest: list[Any]) -> None:
        writers = self.writer.get(k, {})
        failed = self.failed_writer.get(k, {})
        bad: list[int] = [i for i, e in enumerate(longest) if hashable(e) not in writers]
        if not bad:
            return
        first_bad = bad[0]
        aborted_seen = None
        for i, e in enumerate(longest):
            he = hashable(e)
            if he in failed and aborted_seen is None:
                aborted_seen = e
            elif aborted_seen is not None and he in writers:
                self.found.add("dirty-update", {
                    "key": key_text(k), "aborted": edn.dumps(aborted_seen), "then": edn.dumps(e),
                    "text": f"on {key_text(k)}, the committed append of {edn.dumps(e)} came after the aborted append "
                            f"of {edn.dumps(aborted_seen)}: it was built on a state that never committed"})
                break
        for t, rk, val in self._all_reads():
            if rk != k or len(val) <= first_bad or (t.node, k) in self.incompatible:
                continue
            for i in bad:
                if i >= len(val):
                    break
                e = hashable(val[i])
                if e in failed:
                    call = failed[e]
                    self.found.add("G1a", {
                        "op": op_ref(t), "key": key_text(k), "element": edn.dumps(val[i]),
                        "writer": {"index": call.invoke.index, "process": call.process},
                        "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, observing {edn.dumps(val[i])}, "
                                f"appended by op {call.invoke.index} which failed (aborted read)"})
                else:
                    self.found.add("garbage-read", {
                        "op": op_ref(t), "key": key_text(k), "element": edn.dumps(val[i]),
                        "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, observing {edn.dumps(val[i])}, "
                                "which no operation ever appended"})
        for t, rk, val in self._all_reads():
            if rk == k and (t.node, k) in self.incompatible:
                for e in val:
                    if hashable(e) not in writers and hashable(e) not in failed:
                        self.found.add("garbage-read", {
                            "op": op_ref(t), "key": key_text(k), "element": edn.dumps(e),
                            "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, observing {edn.dumps(e)}, "
                                    "which no operation ever appended"})

    def _intermediate_and_lost(self) -> None:
        lost: dict[tuple[Hashable, tuple[Any, ...]], list[Txn]] = defaultdict(list)
        for t in self.txns:
            if t.status != "ok":
                continue
            for k, val in self.ext_reads[t.node].items():
                if val:
                    e = hashable(val[-1])
                    w = self.writer[k].get(e)
                    if w is not None and w != t.node and e in self.intermediate[k]:
                        self.found.add("G1b", {
                            "op": op_ref(t), "key": key_text(k), "element": edn.dumps(val[-1]),
                            "text": f"T{t.node} read {key_text(k)} = {mops_text(val)}, ending in {edn.dumps(val[-1])}, "
                                    f"an intermediate append of T{w} which appended more to {key_text(k)} afterwards"})
                if k in self.appends[t.node]:
                    lost[(k, tuple(map(hashable, val)))].append(t)
        for (k, val), ts in lost.items():
            if len(ts) > 1:
                self.found.add("lost-update", {
                    "key": key_text(k), "value": mops_text(list(val)), "ops": [op_ref(t) for t in ts],
                    "text": f"{len(ts)} committed transactions (T{', T'.join(str(t.node) for t in ts)}) all read "
                            f"{key_text(k)} = {mops_text(list(val))} and then appended to it: all but one update is lost"})

    def add_edges(self, g: DepGraph) -> None:
        for k, longest in self.longest.items():
            writers = self.writer.get(k, {})
            prev = None
            for e in longest:
                w = writers.get(hashable(e))
                if w is not None and prev is not None and prev != w:
                    g.add(prev, w, WW)
                if w is not None:
                    prev = w
            last = writers.get(hashable(longest[-1])) if longest else None
            if last is not None:
                for u in self.unobserved[k]:
                    g.add(last, writers[u], WW)
        for t in self.txns:
            if t.status != "ok":
                continue
            for k, val in self.ext_reads[t.node].items():
                writers = self.writer.get(k, {})
                if val:
                    w = writers.get(hashable(val[-1]))
                    if w is not None:
                        g.add(w, t.node, WR)
                if (t.node, k) in self.incompatible:
                    continue
                longest = self.longest[k]
                n = len(val)
                if n < len(longest):
                    w = writers.get(hashable(longest[n]))
                    if w is not None:
                        g.add(t.node, w, RW)
                else:
                    for u in self.unobserved[k]:
                        g.add(t.node, writers[u], RW)

    def _ww_pair(self, k: Hashable, a: int, b: int) -> tuple[Any, Any] | None:
        """Elements (by a, by b) that made add_edges draw a -ww-> b on key k."""
        writers = self.writer.get(k, {})
        prev: tuple[Any, int] | None = None
        for e in self.longest[k]:
            w = writers.get(hashable(e))
            if w is None:
                continue
            if prev is not None and prev[1] == a and w == b:
                return prev[0], e
            prev = (e, w)
        if prev is not None and prev[1] == a:
            for u in self.unobserved[k]:
                if writers[u] == b:
                    return prev[0], u
        return None

    def explain(self, a: int, rel: int, b: int) -> str:
        if rel == WW:
            for k in self.appends[a].keys() & self.appends[b].keys():
                pair = self._ww_pair(k, a, b)
                if pair is not None:
                    return (f"T{a} appended {edn.dumps(pair[0])} to {key_text(k)} and T{b} appended "
                            f"{edn.dumps(pair[1])} next (ww: the version order of {key_text(k)} puts T{a}'s first)")
        if rel == WR:
            for k, val in self.ext_reads[b].items():
                if val and self.writer[k].get(hashable(val[-1])) == a:
                    return f"T{b} read {key_text(k)} = {mops_text(val)}, observing T{a}'s append of {edn.dumps(val[-1])} (wr)"
        if rel == RW:
            for k, val in self.ext_reads[a].items():
                if k not in self.appends[b]:
                    continue
                longest = self.longest[k]
                nxt = [longest[len(val)]] if len(val) < len(longest) else self.unobserved[k]
                for e in nxt:
                    if self.writer[k].get(hashable(e)) == b:
                        return (f"T{a} read {key_text(k)} = {mops_text(val)}, which did not yet include {edn.dumps(e)}, "
                                f"appended by T{b} (rw: T{b} overwrote the version T{a} read)")
        return self.explain_order(a, b, rel)
