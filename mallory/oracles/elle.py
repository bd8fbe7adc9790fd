"""An Elle-style transactional checker for list-append and rw-register histories.

Pipeline (after Kingsbury & Alvaro, "Elle: Inferring Isolation Anomalies from Experimental
Observations"):

1. Pair invocations with completions; `:ok` and `:info` transactions become graph nodes
   (an `:info` txn may have committed), `:fail` ones are remembered as aborted writes.
2. Per-op anomalies: internal inconsistency, aborted reads (G1a), intermediate reads (G1b),
   reads of never-written values (garbage-read, stricter than Elle), duplicate elements,
   future reads, dirty updates, lost updates.
3. Version orders: for list-append, the longest read of each key (every other read must be
   a prefix, else incompatible-order; appends never read come after it); for rw-register,
   the initial state precedes every write, plus the optional per-key sources (writes
   follow reads in a txn, process order, real-time order).
4. The dependency graph: ww, wr, rw edges from those orders, plus process and real-time
   edges when the consistency models asked for need them.
5. Strongly connected components, then a search in each for a cycle of each prohibited
   shape (G0, G1c, G-single, G-nonadjacent, G2-item and their -process / -realtime
   variants), most severe first, each witness explained in words.

The verdict: invalid if any anomaly the requested models prohibit was found; unknown if
the cycle search ran out of time (or there was nothing to check); valid otherwise.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.ops import Call, Op, pair_calls
from mallory.oracles.consistency import (
    boundary,
    implied_anomalies,
    prohibited_anomalies,
)
from mallory.oracles.depgraph import (
    PROCESS,
    REALTIME,
    RW,
    WR,
    WW,
    CycleSpec,
    DepGraph,
    SearchTimeout,
    Step,
    any_cycle,
    classify,
    cycle_specs,
    find_cycle,
    strongly_connected,
)
from mallory.oracles.result import CheckResult

UNKNOWN_TYPES = {"empty-transaction-graph", "cycle-search-timeout"}
MAX_CASES = 10  # per anomaly type, in the report (the count is always complete)

GARBAGE_NOTE = (
    "garbage-read: a read returned a value that no operation in the history wrote. Elle does not "
    "flag this (a documented gap, elle rw_register_test.clj), so elle-cli calls such a history "
    "valid; this checker is deliberately stricter."
)


@dataclass
class ElleOptions:
    consistency_models: tuple[str, ...] = ("strict-serializable",)
    anomalies: tuple[str, ...] = ()
    time_limit: float | None = None  # seconds for the whole cycle search
    cycle_search_timeout: float = 1.0  # seconds per anomaly shape per component, as Elle
    wfr_keys: bool = False  # rw-register: writes follow reads within a txn
    sequential_keys: bool = False  # rw-register: per-key process order orders versions
    linearizable_keys: bool = False  # rw-register: per-key real-time order orders versions


@dataclass
class Txn:
    node: int
    call: Call
    status: str  # "ok" or "info"
    mops: list[list[Any]]


@dataclass
class Found:
    """Non-cycle anomalies and the graph, as inferred from one history."""

    cases: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, case: dict[str, Any]) -> None:
        self.cases[kind].append(case)


def _mop_text(mops: Any, limit: int = 160) -> str:
    text = edn.dumps(_edn_ready(mops))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _edn_ready(value: Any) -> Any:
    if isinstance(value, list):
        return [_edn_ready(v) for v in value]
    if isinstance(value, tuple):
        return [_edn_ready(v) for v in value]
    return value


def _k(key: Any) -> str:
    return edn.dumps(key) if isinstance(key, (str, int)) or key is None else repr(key)


def _op_ref(txn: Txn) -> dict[str, Any]:
    op = txn.call.done if txn.call.done is not None else txn.call.invoke
    return {"index": op.index, "process": op.process, "type": txn.status, "line": op.line}


def _prepare(history: list[Op], kind: str, source: str) -> tuple[list[Txn], list[Txn]]:
    """(ok/info transactions, failed transactions), micro-ops checked and made hashable."""
    reads = ("r",)
    writes = ("append",) if kind == "list-append" else ("w",)
    calls = pair_calls(history, source=source)
    txns: list[Txn] = []
    failed: list[Txn] = []
    for call in calls:
        value = call.value if call.status == "ok" else call.invoke.value
        where = call.invoke.line if call.invoke.line is not None else f"op {call.invoke.index}"
        if not isinstance(value, list):
            raise MalloryError(f"{source}:{where}: a {kind} transaction must be a list of micro-ops, got {value!r}")
        mops = []
        for mop in value:
            if not (isinstance(mop, list) and len(mop) == 3 and mop[0] in reads + writes):
                raise MalloryError(
                    f"{source}:{where}: bad {kind} micro-op {mop!r}; expected [{'|'.join(reads + writes)} key value]"
                )
            f, k, v = mop
            if f == "r" and kind == "list-append" and call.status == "ok":
                if v is not None and not isinstance(v, (list, tuple)):
                    raise MalloryError(f"{source}:{where}: a list-append read must return a list, got {v!r}")
                v = None if v is None else [_hashable(e) for e in v]
            else:
                v = _hashable(v)
            mops.append([f, _hashable(k), v])
        if call.status == "fail":
            failed.append(Txn(-1, call, "fail", mops))
        else:
            txns.append(Txn(len(txns), call, call.status, mops))
    return txns, failed


def _frontier_edges(txns: Iterable[Txn]) -> list[tuple[int, int]]:
    """The transitive reduction of real-time order ("a completed before b was invoked")."""
    events: list[tuple[int, int, Txn]] = []
    for t in txns:
        events.append((t.call.start, 1, t))
        if t.status == "ok":
            events.append((t.call.end, 0, t))
    events.sort(key=lambda e: (e[0], e[1]))
    frontier: set[int] = set()
    preds: dict[int, tuple[int, ...]] = {}
    edges: list[tuple[int, int]] = []
    for _, is_invoke, t in events:
        if is_invoke:
            preds[t.node] = tuple(frontier)
            edges.extend((p, t.node) for p in frontier)
        else:
            frontier.difference_update(preds.get(t.node, ()))
            frontier.add(t.node)
    return edges


def _process_edges(txns: Iterable[Txn]) -> list[tuple[int, int]]:
    last: dict[Any, int] = {}
    edges = []
    for t in sorted(txns, key=lambda t: t.call.start):
        p = t.call.process
        if p in last:
            edges.append((last[p], t.node))
        last[p] = t.node
    return edges


class _Analysis:
    """Shared by the two workloads: edge explanation for process / real-time edges."""

    txns: list[Txn]

    def describe(self, node: int) -> str:
        t = self.txns[node]
        ref = _op_ref(t)
        where = f"line {ref['line']}" if ref["line"] is not None else f"index {ref['index']}"
        return f"process {ref['process']}, {where}{' (info)' if t.status == 'info' else ''}: {_mop_text(t.mops)}"

    def explain_order(self, a: int, b: int, rel: int) -> str:
        ta, tb = self.txns[a].call, self.txns[b].call
        if rel == PROCESS:
            return f"process {ta.process} ran T{a} before T{b} (process order)"
        if rel != REALTIME:
            return f"of a {REL_WORD[rel]} dependency"
        return (
            f"T{a} completed (op {ta.done.index if ta.done else '?'}) before T{b} was invoked "
            f"(op {tb.invoke.index}) (real-time order)"
        )


class ListAppendAnalysis(_Analysis):
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
            if v is not None and not isinstance(v, list):
                raise MalloryError(f"list-append read of {_k(k)} must be a list, got {v!r} (op {t.call.invoke.index})")
            val = [] if v is None else v
            if len(set(map(_hashable, val))) != len(val):
                self.found.add("duplicate-elements", {
                    "op": _op_ref(t), "key": _k(k), "read": _mop_text(val),
                    "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, which holds an element twice"})
            later = set(appends.get(k, ())) - seen.get(k, set())
            if later and later & set(map(_hashable, val)):
                self.found.add("future-read", {
                    "op": _op_ref(t), "key": _k(k), "read": _mop_text(val),
                    "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, including its own later append"})
            if k in known:
                if val != known[k]:
                    self._internal_case(t, i, k, val, _mop_text(known[k]))
            elif k in suffix:
                s = suffix[k]
                if val[-len(s):] != s:
                    self._internal_case(t, i, k, val, "[... " + " ".join(edn.dumps(e) for e in s) + "]")
            known[k] = list(val)

    def _internal_case(self, t: Txn, i: int, k: Any, val: list[Any], expected: str) -> None:
        self.found.add("internal", {
            "op": _op_ref(t), "mop": i, "key": _k(k), "read": _mop_text(val), "expected": expected,
            "text": f"T{t.node} read {_k(k)} = {_mop_text(val)} but its own earlier micro-ops imply {expected}"})

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
                tv = tuple(map(_hashable, val))
                if tv in seen_vals:
                    continue
                seen_vals.add(tv)
                self.found.add("incompatible-order", {
                    "key": _k(k), "op": _op_ref(t), "read": _mop_text(val), "longest": _mop_text(self.longest[k]),
                    "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, which is not a prefix of the longest "
                            f"read {_mop_text(self.longest[k])}: the two could not come from one order"})
        for k, longest in self.longest.items():
            observed = set(map(_hashable, longest))
            self.unobserved[k] = [e for e in self.writer[k] if e not in observed]
            self._check_versions(k, longest)

    def _check_versions(self, k: Hashable, longest: list[Any]) -> None:
        writers = self.writer.get(k, {})
        failed = self.failed_writer.get(k, {})
        bad: list[int] = [i for i, e in enumerate(longest) if _hashable(e) not in writers]
        if not bad:
            return
        first_bad = bad[0]
        aborted_seen = None
        for i, e in enumerate(longest):
            he = _hashable(e)
            if he in failed and aborted_seen is None:
                aborted_seen = e
            elif aborted_seen is not None and he in writers:
                self.found.add("dirty-update", {
                    "key": _k(k), "aborted": edn.dumps(aborted_seen), "then": edn.dumps(e),
                    "text": f"on {_k(k)}, the committed append of {edn.dumps(e)} came after the aborted append "
                            f"of {edn.dumps(aborted_seen)}: it was built on a state that never committed"})
                break
        for t, rk, val in self._all_reads():
            if rk != k or len(val) <= first_bad or (t.node, k) in self.incompatible:
                continue
            for i in bad:
                if i >= len(val):
                    break
                e = _hashable(val[i])
                if e in failed:
                    call = failed[e]
                    self.found.add("G1a", {
                        "op": _op_ref(t), "key": _k(k), "element": edn.dumps(val[i]),
                        "writer": {"index": call.invoke.index, "process": call.process},
                        "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, observing {edn.dumps(val[i])}, "
                                f"appended by op {call.invoke.index} which failed (aborted read)"})
                else:
                    self.found.add("garbage-read", {
                        "op": _op_ref(t), "key": _k(k), "element": edn.dumps(val[i]),
                        "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, observing {edn.dumps(val[i])}, "
                                "which no operation ever appended"})
        for t, rk, val in self._all_reads():
            if rk == k and (t.node, k) in self.incompatible:
                for e in val:
                    if _hashable(e) not in writers and _hashable(e) not in failed:
                        self.found.add("garbage-read", {
                            "op": _op_ref(t), "key": _k(k), "element": edn.dumps(e),
                            "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, observing {edn.dumps(e)}, "
                                    "which no operation ever appended"})

    def intermediate_and_lost(self) -> None:
        lost: dict[tuple[Hashable, tuple[Any, ...]], list[Txn]] = defaultdict(list)
        for t in self.txns:
            if t.status != "ok":
                continue
            for k, val in self.ext_reads[t.node].items():
                if val:
                    e = _hashable(val[-1])
                    w = self.writer[k].get(e)
                    if w is not None and w != t.node and e in self.intermediate[k]:
                        self.found.add("G1b", {
                            "op": _op_ref(t), "key": _k(k), "element": edn.dumps(val[-1]),
                            "text": f"T{t.node} read {_k(k)} = {_mop_text(val)}, ending in {edn.dumps(val[-1])}, "
                                    f"an intermediate append of T{w} which appended more to {_k(k)} afterwards"})
                if k in self.appends[t.node]:
                    lost[(k, tuple(map(_hashable, val)))].append(t)
        for (k, val), ts in lost.items():
            if len(ts) > 1:
                self.found.add("lost-update", {
                    "key": _k(k), "value": _mop_text(list(val)), "ops": [_op_ref(t) for t in ts],
                    "text": f"{len(ts)} committed transactions (T{', T'.join(str(t.node) for t in ts)}) all read "
                            f"{_k(k)} = {_mop_text(list(val))} and then appended to it: all but one update is lost"})

    def add_edges(self, g: DepGraph) -> None:
        for k, longest in self.longest.items():
            writers = self.writer.get(k, {})
            prev = None
            for e in longest:
                w = writers.get(_hashable(e))
                if w is not None and prev is not None and prev != w:
                    g.add(prev, w, WW)
                if w is not None:
                    prev = w
            last = writers.get(_hashable(longest[-1])) if longest else None
            if last is not None:
                for u in self.unobserved[k]:
                    g.add(last, writers[u], WW)
        for t in self.txns:
            if t.status != "ok":
                continue
            for k, val in self.ext_reads[t.node].items():
                writers = self.writer.get(k, {})
                if val:
                    w = writers.get(_hashable(val[-1]))
                    if w is not None:
                        g.add(w, t.node, WR)
                if (t.node, k) in self.incompatible:
                    continue
                longest = self.longest[k]
                n = len(val)
                if n < len(longest):
                    w = writers.get(_hashable(longest[n]))
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
            w = writers.get(_hashable(e))
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
                    return (f"T{a} appended {edn.dumps(pair[0])} to {_k(k)} and T{b} appended "
                            f"{edn.dumps(pair[1])} next (ww: the version order of {_k(k)} puts T{a}'s first)")
        if rel == WR:
            for k, val in self.ext_reads[b].items():
                if val and self.writer[k].get(_hashable(val[-1])) == a:
                    return f"T{b} read {_k(k)} = {_mop_text(val)}, observing T{a}'s append of {edn.dumps(val[-1])} (wr)"
        if rel == RW:
            for k, val in self.ext_reads[a].items():
                if k not in self.appends[b]:
                    continue
                longest = self.longest[k]
                nxt = [longest[len(val)]] if len(val) < len(longest) else self.unobserved[k]
                for e in nxt:
                    if self.writer[k].get(_hashable(e)) == b:
                        return (f"T{a} read {_k(k)} = {_mop_text(val)}, which did not yet include {edn.dumps(e)}, "
                                f"appended by T{b} (rw: T{b} overwrote the version T{a} read)")
        return self.explain_order(a, b, rel)


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((_hashable(k), _hashable(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (set, frozenset)):
        return frozenset(_hashable(x) for x in v)
    return v


class RwRegisterAnalysis(_Analysis):
    def __init__(self, txns: list[Txn], failed: list[Txn], found: Found, opts: ElleOptions) -> None:
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
        self._version_order(opts)

    def _scan(self, t: Txn) -> None:
        ext_r: dict[Hashable, Any] = {}
        ext_w: dict[Hashable, Any] = {}
        known: dict[Hashable, Any] = {}
        ok = t.status == "ok"
        for i, (f, k, v) in enumerate(t.mops):
            hv = _hashable(v)
            if f == "w":
                if k in ext_w:
                    self.intermediate[k][ext_w[k]] = t.node
                ext_w[k] = hv
                known[k] = hv
            elif ok:
                if k in known:
                    if known[k] != hv:
                        self.found.add("internal", {
                            "op": _op_ref(t), "mop": i, "key": _k(k), "read": edn.dumps(v),
                            "expected": edn.dumps(known[k]),
                            "text": f"T{t.node} read {_k(k)} = {edn.dumps(v)} but its own earlier micro-ops imply "
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
                    "op": _op_ref(t), "key": _k(k), "value": edn.dumps(v),
                    "text": f"T{t.node} read {_k(k)} = {edn.dumps(v)}, an intermediate write of "
                            f"T{self.intermediate[k][v]} that it overwrote before committing"})
            elif v in self.failed_writer[k]:
                call = self.failed_writer[k][v]
                self.found.add("G1a", {
                    "op": _op_ref(t), "key": _k(k), "value": edn.dumps(v),
                    "writer": {"index": call.invoke.index, "process": call.process},
                    "text": f"T{t.node} read {_k(k)} = {edn.dumps(v)}, written by op {call.invoke.index} "
                            "which failed (aborted read)"})
            elif v not in self.intermediate[k]:
                self.found.add("garbage-read", {
                    "op": _op_ref(t), "key": _k(k), "value": edn.dumps(v),
                    "text": f"T{t.node} read {_k(k)} = {edn.dumps(v)}, a value no operation ever wrote"})

    def _version_order(self, opts: ElleOptions) -> None:
        edges = self.version_edges
        if opts.wfr_keys:
            for t in self.txns:
                for k, w in self.ext_writes[t.node].items():
                    r = self.ext_reads[t.node].get(k)
                    if r is not None and r != w:
                        edges[k][r].add(w)
        pairs: list[tuple[int, int]] = []
        if opts.sequential_keys:
            pairs.extend(self._per_key_pairs(_process_edges))
        if opts.linearizable_keys:
            pairs.extend(self._per_key_pairs(_frontier_edges))
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
                    "key": _k(k), "values": _mop_text(list(cyc)),
                    "text": f"the version order of {_k(k)} is cyclic over {_mop_text(list(cyc))}"})

    def _per_key_pairs(self, order) -> list[tuple[Hashable, int, int]]:  # type: ignore[no-untyped-def]
        by_key: dict[Hashable, list[Txn]] = defaultdict(list)
        for t in self.txns:
            for k in self.ext_reads[t.node].keys() | self.ext_writes[t.node].keys():
                by_key[k].append(t)
        return [(k, a, b) for k, ts in by_key.items() for a, b in order(ts)]

    def lost_updates(self) -> None:
        lost: dict[tuple[Hashable, Any], list[Txn]] = defaultdict(list)
        for t in self.txns:
            if t.status == "ok":
                for k, v in self.ext_reads[t.node].items():
                    if k in self.ext_writes[t.node]:
                        lost[(k, v)].append(t)
        for (k, v), ts in lost.items():
            if len(ts) > 1:
                self.found.add("lost-update", {
                    "key": _k(k), "value": edn.dumps(v), "ops": [_op_ref(t) for t in ts],
                    "text": f"{len(ts)} committed transactions (T{', T'.join(str(t.node) for t in ts)}) all read "
                            f"{_k(k)} = {edn.dumps(v)} and then wrote it: all but one update is lost"})

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
                    return f"T{a} wrote {_k(k)} = {edn.dumps(v1)}, which precedes T{b}'s write of {edn.dumps(v2)} (ww)"
        if rel == WR:
            for k, v in self.ext_reads[b].items():
                if v is not None and self.writer[k].get(v) == a:
                    return f"T{b} read {_k(k)} = {edn.dumps(v)}, written by T{a} (wr)"
        if rel == RW:
            for k, v in self.ext_reads[a].items():
                w = self.ext_writes[b].get(k)
                if w is not None and self._follows(k, v, w):
                    return (f"T{a} read {_k(k)} = {edn.dumps(v)}, a version T{b} overwrote with "
                            f"{edn.dumps(w)} (rw)")
        return self.explain_order(a, b, rel)


REL_WORD = {WW: "ww", WR: "wr", RW: "rw", PROCESS: "process", REALTIME: "realtime"}


def _explain_cycle(analysis: ListAppendAnalysis | RwRegisterAnalysis, kind: str, cycle: list[Step]) -> dict[str, Any]:
    nodes = [a for a, _, _ in cycle]
    lines = [f"{kind} cycle over {len(nodes)} transactions:"]
    lines.extend(f"  T{n} = {analysis.describe(n)}" for n in nodes)
    lines.append("  Then:")
    for i, (a, rel, b) in enumerate(cycle):
        lead = "However, " if i == len(cycle) - 1 else ""
        end = ": a contradiction!" if i == len(cycle) - 1 else "."
        lines.append(f"  - {lead}T{a} < T{b}, because {analysis.explain(a, rel, b)}{end}")
    return {
        "type": kind,
        "cycle": [{"from": a, "rel": REL_WORD[rel], "to": b, "op": _op_ref(analysis.txns[a])} for a, rel, b in cycle],
        "text": "\n".join(lines),
    }


def _search_component(graph: DepGraph, comp: list[int], specs: list[CycleSpec], prohibited: set[str],
                      analysis: ListAppendAnalysis | RwRegisterAnalysis, found: Found, rels: int,
                      deadline: float | None, per_spec: float) -> None:
    """Name the cycles of one strongly connected component.

    First any cycle at all (cheap, so an invalid history is always reported as such), then
    each prohibited shape, most severe first, skipping shapes implied by ones already
    found here. Each shape gets `per_spec` seconds (Elle's per-SCC cycle-search timeout);
    running out of it is recorded and the search moves on. Running past the overall
    `deadline` raises SearchTimeout.
    """
    found_here: set[str] = set()
    witness = any_cycle(graph, comp, rels, deadline)
    name = classify(witness)
    if name in prohibited:
        found_here.add(name)
        found.add(name, _explain_cycle(analysis, name, witness))
    for spec in specs:
        if spec.name in implied_anomalies(found_here):
            continue
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise SearchTimeout
        spec_deadline = now + per_spec if deadline is None else min(deadline, now + per_spec)
        try:
            cycle = find_cycle(graph, comp, spec, spec_deadline)
        except SearchTimeout:
            if deadline is not None and time.monotonic() > deadline:
                raise
            found.add("cycle-search-timeout", {
                "searching": spec.name, "scc_size": len(comp),
                "text": f"gave up looking for {spec.name} after {per_spec:g} s in a strongly connected "
                        f"component of {len(comp)} transactions"})
            continue
        if cycle is not None:
            found_here.add(spec.name)
            found.add(spec.name, _explain_cycle(analysis, spec.name, cycle))


def check_elle(history: list[Op], kind: str, opts: ElleOptions | None = None, source: str = "<history>") -> CheckResult:
    """Check a list-append or rw-register history; see the module doc."""
    if kind not in ("list-append", "rw-register"):
        raise MalloryError(f"unknown transactional workload {kind!r}; known: list-append, rw-register")
    opts = opts or ElleOptions()
    prohibited = prohibited_anomalies(opts.consistency_models, opts.anomalies)
    started = time.monotonic()
    deadline = None if opts.time_limit is None else started + opts.time_limit
    txns, failed = _prepare(history, kind, source)
    found = Found()
    analysis: ListAppendAnalysis | RwRegisterAnalysis
    if kind == "list-append":
        analysis = ListAppendAnalysis(txns, failed, found)
        analysis.intermediate_and_lost()
    else:
        analysis = RwRegisterAnalysis(txns, failed, found, opts)
        analysis.lost_updates()
    graph = DepGraph(len(txns))
    analysis.add_edges(graph)
    specs = [s for s in cycle_specs() if s.name in prohibited]
    if any(s.name.endswith("-realtime") for s in specs):
        for a, b in _frontier_edges(txns):
            graph.add(a, b, REALTIME)
    elif any(s.name.endswith("-process") for s in specs):
        for a, b in _process_edges(txns):
            graph.add(a, b, PROCESS)
    if not any(t.status == "ok" for t in txns):
        found.add("empty-transaction-graph", {"text": "no transaction completed ok: there is nothing to check"})
    inferred_at = time.monotonic()
    components = sorted(strongly_connected(graph, -1), key=len)
    rels = WW | WR | RW | PROCESS | REALTIME
    for comp in components:
        try:
            _search_component(graph, comp, specs, prohibited, analysis, found, rels, deadline,
                              opts.cycle_search_timeout)
        except SearchTimeout:
            found.add("cycle-search-timeout", {
                "scc_size": len(comp),
                "text": f"the time limit ran out while searching a strongly connected component of "
                        f"{len(comp)} transactions ({len(components)} components in all)"})
            break
    reportable = prohibited | UNKNOWN_TYPES
    types = sorted(t for t in found.cases if t in reportable)
    bad = [t for t in types if t in prohibited]
    valid: bool | str = False if bad else ("unknown" if types else True)
    not_models, also_not = boundary(bad) if bad else ([], [])
    anomalies = {t: found.cases[t][:MAX_CASES] for t in types}
    explanation: list[str] = []
    for t in types:
        cases = found.cases[t]
        explanation.append(f"{t} ({len(cases)} case{'s' if len(cases) != 1 else ''}):")
        for case in cases[:3]:
            explanation.extend("  " + line for line in case["text"].splitlines())
    unreported = sorted(t for t in found.cases if t not in reportable)
    notes = []
    if "garbage-read" in types:
        notes.append(GARBAGE_NOTE)
    if unreported:
        notes.append("also seen, but allowed by the requested models: " + ", ".join(unreported))
    if valid is True:
        explanation.append(
            f"no anomaly prohibited by {', '.join(opts.consistency_models) or 'the requested models'}"
            f"{' or ' + ', '.join(opts.anomalies) if opts.anomalies else ''} in {len(txns)} transactions")
    stats = {
        "transactions": len(txns),
        "failed": len(failed),
        "edges": graph.edge_count(),
        "sccs": len(components),
        "largest_scc": max((len(c) for c in components), default=0),
        "inference_seconds": round(inferred_at - started, 3),
        "cycle_search_seconds": round(time.monotonic() - inferred_at, 3),
    }
    return CheckResult(valid, kind, types, anomalies, explanation, not_models, also_not, notes, stats)
