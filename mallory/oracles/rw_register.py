"""The rw-register analyser (after Elle's elle.rw-register).

Each key holds one value; a transaction writes ([:w k v], values unique per key) and
reads ([:r k v], nil for the initial state). A read says which write it saw, but not what
came before: the initial state precedes every write, and further version order comes
only from the sources the caller enables (`RwRegisterAnalysis`).

From the transactions alone: internal inconsistency, aborted reads (G1a), intermediate
reads (G1b), garbage reads, cyclic version orders and lost updates. Edges: wr from a
write to its readers, ww and rw along the known version order (a read of the initial
state rw-precedes every write).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from typing import Any

from mallory.history import edn
from mallory.history.ops import Call
from mallory.oracles.depgraph import RW, WR, WW, DepGraph, strongly_connected
from mallory.oracles.txn import (
    Found,
    Txn,
    TxnAnalysis,
    hashable,
    key_text,
    mops_text,
    op_ref,
    process_edges,
    realtime_edges,
)


class RwRegisterAnalysis(TxnAnalysis):
    """An rw-register history: micro-ops [:w k v] and [:r k v]; see the module doc.

    The version order of a key comes from its sources chosen here: `wfr_keys` (a txn's
    write follows its read), `sequential_keys` (per-key process order),
    `linearizable_keys` (per-key real-time order)."""

    KIND = "rw-register"
    WRITE = "w"

    def __init__(self, txns: list[Txn], failed: list[Txn], found: Found, *, wfr_keys: bool = False,
                 sequential_keys: bool = False, linearizable_keys: bool = False) -> None:
        self.txns = txns
        self.found = found
        self.writer: dict[Hashable, dict[Any, int]] = defaultdict(dict)
        self.intermediate: dict[Hashable, dict[Any, int]] = defaultdict(dict)
        self.failed_writer: dict[Hashable, dict[Any, Call]] = defaultdict(dict)
        self.ext_reads: list[dict[Hashable, Any]] = []
        self.ext_writes: list[dict[Hashable, Any]] = []
        self.readers: dict[Hashable, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.version_edges: dict[Hashable, dict[Any, set[Any]]] = defaultdict(lambda: defaultdict(set))
        for ft in failed:
            for f, k, v in ft.mops:
                if f == "w":
                    self.failed_writer[k][v] = ft.call
        for t in txns:
            self._scan(t)
        for t in txns:
            if t.status == "ok":
                self._check_reads(t)
        self._version_order(wfr_keys, sequential_keys, linearizable_keys)
        self._lost_updates()

    def _scan(self, t: Txn) -> None:
        ext_r: dict[Hashable, Any] = {}
        ext_w: dict[Hashable, Any] = {}
        known: dict[Hashable, Any] = {}
        ok = t.status == "ok"
        for i, (f, k, v) in enumerate(t.mops):
            hv = hashable(v)
            if f == "w":
                if k in ext_w:
                    self.intermediate[k][ext_w[k]] = t.node
                ext_w[k] = hv
                known[k] = hv
            elif ok:
                if k in known:
                    if known[k] != hv:
                        self.found.add("internal", {
                            "op": op_ref(t), "mop": i, "key": key_text(k), "read": edn.dumps(v),
                            "expected": edn.dumps(known[k]),
                            "text": f"T{t.node} read {key_text(k)} = {edn.dumps(v)} but its own earlier micro-ops imply "
                                    f"{edn.dumps(known[k])}"})
                else:
                    ext_r[k] = hv
                known[k] = hv
        for k, v in ext_w.items():
            self.writer[k][v] = t.node
        for k, v in ext_r.items():
            self.readers[k][v].append(t.node)
        self.ext_reads.append(ext_r)
        self.ext_writes.append(ext_w)

    def _check_reads(self, t: Txn) -> None:
        for k, v in self.ext_reads[t.node].items():
            if v is None or v in self.writer[k]:
                continue
            if v in self.intermediate[k] and self.intermediate[k][v] != t.node:
                self.found.add("G1b", {
                    "op": op_ref(t), "key": key_text(k), "value": edn.dumps(v),
                    "text": f"T{t.node} read {key_text(k)} = {edn.dumps(v)}, an intermediate write of "
                            f"T{self.intermediate[k][v]} that it overwrote before committing"})
            elif v in self.failed_writer[k]:
                call = self.failed_writer[k][v]
                self.found.add("G1a", {
                    "op": op_ref(t), "key": key_text(k), "value": edn.dumps(v),
                    "writer": {"index": call.invoke.index, "process": call.process},
                    "text": f"T{t.node} read {key_text(k)} = {edn.dumps(v)}, written by op {call.invoke.index} "
                            "which failed (aborted read)"})
            elif v not in self.intermediate[k]:
                self.found.add("garbage-read", {
                    "op": op_ref(t), "key": key_text(k), "value": edn.dumps(v),
                    "text": f"T{t.node} read {key_text(k)} = {edn.dumps(v)}, a value no operation ever wrote"})

    def _version_order(self, wfr_keys: bool, sequential_keys: bool, linearizable_keys: bool) -> None:
        edges = self.version_edges
        if wfr_keys:
            for t in self.txns:
                for k, w in self.ext_writes[t.node].items():
                    r = self.ext_reads[t.node].get(k)
                    if r is not None and r != w:
                        edges[k][r].add(w)
        pairs: list[tuple[int, int]] = []
        if sequential_keys:
            pairs.extend(self._per_key_pairs(process_edges))
        if linearizable_keys:
            pairs.extend(self._per_key_pairs(realtime_edges))
        for k, a, b in pairs:  # type: ignore[misc]
            after = self.ext_writes[a].get(k, self.ext_reads[a].get(k))
            before = self.ext_reads[b].get(k, self.ext_writes[b].get(k))
            if after is not None and before is not None and after != before:
                edges[k][after].add(before)
        for k, graph in edges.items():
            values = sorted({v for v in graph} | {w for ws in graph.values() for w in ws}, key=repr)
            ids = {v: i for i, v in enumerate(values)}
            vg = DepGraph(len(values))
            for v, ws in graph.items():
                for w in ws:
                    vg.add(ids[v], ids[w], WW)
            for comp in strongly_connected(vg, WW):
                cyc = sorted((values[i] for i in comp), key=repr)
                self.found.add("cyclic-versions", {
                    "key": key_text(k), "values": mops_text(list(cyc)),
                    "text": f"the version order of {key_text(k)} is cyclic over {mops_text(list(cyc))}"})

    def _per_key_pairs(self, order) -> list[tuple[Hashable, int, int]]:  # type: ignore[no-untyped-def]
        by_key: dict[Hashable, list[Txn]] = defaultdict(list)
        for t in self.txns:
            for k in self.ext_reads[t.node].keys() | self.ext_writes[t.node].keys():
                by_key[k].append(t)
        return [(k, a, b) for k, ts in by_key.items() for a, b in order(ts)]

    def _lost_updates(self) -> None:
        lost: dict[tuple[Hashable, Any], list[Txn]] = defaultdict(list)
        for t in self.txns:
            if t.status == "ok":
                for k, v in self.ext_reads[t.node].items():
                    if k in self.ext_writes[t.node]:
                        lost[(k, v)].append(t)
        for (k, v), ts in lost.items():
            if len(ts) > 1:
                self.found.add("lost-update", {
                    "key": key_text(k), "value": edn.dumps(v), "ops": [op_ref(t) for t in ts],
                    "text": f"{len(ts)} committed transactions (T{', T'.join(str(t.node) for t in ts)}) all read "
                            f"{key_text(k)} = {edn.dumps(v)} and then wrote it: all but one update is lost"})

    def add_edges(self, g: DepGraph) -> None:
        for k, readers in self.readers.items():
            writers = self.writer.get(k, {})
            for v, nodes in readers.items():
                if v is None:
                    for w in writers.values():
                        for r in nodes:
                            g.add(r, w, RW)
                elif v in writers:
                    for r in nodes:
                        g.add(writers[v], r, WR)
        for k, graph in self.version_edges.items():
            writers = self.writer.get(k, {})
            readers = self.readers.get(k, {})
            for v1, vs in graph.items():
                for v2 in vs:
                    w2 = writers.get(v2)
                    if w2 is None:
                        continue
                    w1 = writers.get(v1)
                    if w1 is not None:
                        g.add(w1, w2, WW)
                    for r in readers.get(v1, ()):
                        g.add(r, w2, RW)

    def _follows(self, k: Hashable, v1: Any, v2: Any) -> bool:
        return v1 is None or v2 in self.version_edges.get(k, {}).get(v1, ())

    def explain(self, a: int, rel: int, b: int) -> str:
        if rel == WW:
            for k in self.ext_writes[a].keys() & self.ext_writes[b].keys():
                v1, v2 = self.ext_writes[a][k], self.ext_writes[b][k]
                if self._follows(k, v1, v2):
                    return f"T{a} wrote {key_text(k)} = {edn.dumps(v1)}, which precedes T{b}'s write of {edn.dumps(v2)} (ww)"
        if rel == WR:
            for k, v in self.ext_reads[b].items():
                if v is not None and self.writer[k].get(v) == a:
                    return f"T{b} read {key_text(k)} = {edn.dumps(v)}, written by T{a} (wr)"
        if rel == RW:
            for k, v in self.ext_reads[a].items():
                w = self.ext_writes[b].get(k)
                if w is not None and self._follows(k, v, w):
                    return (f"T{a} read {key_text(k)} = {edn.dumps(v)}, a version T{b} overwrote with "
                            f"{edn.dumps(w)} (rw)")
        return self.explain_order(a, b, rel)
