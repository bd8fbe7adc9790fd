"""What the list-append and rw-register analysers share: transactions, the dependency
graph, the cycle search and its explanations, and the verdict (after Elle's elle.txn).

A workload's analyser (`list_append.ListAppendAnalysis`, `rw_register.RwRegisterAnalysis`)
is a `TxnAnalysis`: it reads the transactions `prepare` makes of a history, records the
anomalies single transactions show, and draws the ww / wr / rw edges its version orders
imply. The rest is workload-blind and lives here: `dependency_graph` adds process or
real-time edges when a prohibited anomaly needs them, `search_cycles` names the cycles of
each strongly connected component, each witness explained in the analyser's words, and
`verdict` classifies what was found against the requested models
(`mallory.oracles.consistency`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.ops import Call, Op, pair_calls
from mallory.oracles.consistency import boundary, implied_anomalies
from mallory.oracles.depgraph import (
    PROCESS,
    REALTIME,
    REL_NAMES,
    RW,
    WR,
    WW,
    CycleSpec,
    DepGraph,
    SearchTimeout,
    Step,
    any_cycle,
    classify,
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
class Txn:
    """One transaction: graph node `node` (-1 for a failed one, which is no node)."""

    node: int
    call: Call
    status: str  # "ok" or "info" ("fail" for a failed one)
    mops: list[list[Any]]  # [f, key, value], keys and values made hashable


@dataclass
class Found:
    """Every anomaly case found in one history, by type, in the order found. A case is a
    dict with at least "text", its explanation in words."""

    cases: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, case: dict[str, Any]) -> None:
        self.cases[kind].append(case)


def hashable(v: Any) -> Any:
    """`v` as a hashable value: lists and tuples as tuples, dicts as sorted item tuples, sets
    as frozensets, recursively."""
    if isinstance(v, (list, tuple)):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((hashable(k), hashable(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (set, frozenset)):
        return frozenset(hashable(x) for x in v)
    return v


def mops_text(mops: Any, limit: int = 160) -> str:
    """Micro-ops (or a read's value) as EDN for an explanation, cut to `limit` characters."""
    text = edn.dumps(mops)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def key_text(key: Any) -> str:
    """A key as an explanation writes it."""
    return edn.dumps(key) if isinstance(key, (str, int)) or key is None else repr(key)


def op_ref(txn: Txn) -> dict[str, Any]:
    """Which op of the history a transaction is (its completion when it has one)."""
    op = txn.call.done if txn.call.done is not None else txn.call.invoke
    return {"index": op.index, "process": op.process, "type": txn.status, "line": op.line}


class TxnAnalysis:
    """A workload's analysis of its transactions; what the shared pipeline asks of it.

    KIND names the workload, WRITE its write micro-op (reads are "r"); `read_value` checks
    a completed read's value and makes it hashable (`prepare` calls it). Constructing an
    analysis over the `prepare`d transactions records into `found` every anomaly that
    single transactions show. Then `add_edges` draws the ww / wr / rw edges its version
    orders imply, and `explain(a, rel, b)` says in words why T{a} -rel-> T{b}.
    """

    KIND: ClassVar[str]
    WRITE: ClassVar[str]
    txns: list[Txn]

    @staticmethod
    def read_value(value: Any, where: str) -> Any:
        """A completed read's value made hashable; a workload whose reads have a shape
        checks it, raising MalloryError that names `where`."""
        return hashable(value)

    def add_edges(self, graph: DepGraph) -> None:
        raise NotImplementedError

    def explain(self, a: int, rel: int, b: int) -> str:
        raise NotImplementedError

    def describe(self, node: int) -> str:
        """Transaction `node` for an explanation: who ran it, where, its micro-ops."""
        t = self.txns[node]
        ref = op_ref(t)
        where = f"line {ref['line']}" if ref["line"] is not None else f"index {ref['index']}"
        return f"process {ref['process']}, {where}{' (info)' if t.status == 'info' else ''}: {mops_text(t.mops)}"

    def explain_order(self, a: int, b: int, rel: int) -> str:
        """Why T{a} -rel-> T{b} for the edges no workload draws: process and real-time order."""
        ta, tb = self.txns[a].call, self.txns[b].call
        if rel == PROCESS:
            return f"process {ta.process} ran T{a} before T{b} (process order)"
        if rel != REALTIME:
            return f"of a {REL_NAMES[rel]} dependency"
        return (
            f"T{a} completed (op {ta.done.index if ta.done else '?'}) before T{b} was invoked "
            f"(op {tb.invoke.index}) (real-time order)"
        )


def prepare(history: list[Op], analysis: type[TxnAnalysis], source: str) -> tuple[list[Txn], list[Txn]]:
    """(ok/info transactions, failed transactions) of a history of `analysis`'s workload:
    calls paired, micro-ops checked and made hashable. An :info transaction may have
    committed, so it is a graph node; a failed one is only remembered for aborted reads."""
    kind, mop_fs = analysis.KIND, ("r", analysis.WRITE)
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
            if not (isinstance(mop, list) and len(mop) == 3 and mop[0] in mop_fs):
                raise MalloryError(
                    f"{source}:{where}: bad {kind} micro-op {mop!r}; expected [{'|'.join(mop_fs)} key value]"
                )
            f, k, v = mop
            v = analysis.read_value(v, f"{source}:{where}") if f == "r" and call.status == "ok" else hashable(v)
            mops.append([f, hashable(k), v])
        if call.status == "fail":
            failed.append(Txn(-1, call, "fail", mops))
        else:
            txns.append(Txn(len(txns), call, call.status, mops))
    return txns, failed


def realtime_edges(txns: Iterable[Txn]) -> list[tuple[int, int]]:
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


def process_edges(txns: Iterable[Txn]) -> list[tuple[int, int]]:
    """Each process's transactions in the order it ran them, as (earlier, next) pairs."""
    last: dict[Any, int] = {}
    edges = []
    for t in sorted(txns, key=lambda t: t.call.start):
        p = t.call.process
        if p in last:
            edges.append((last[p], t.node))
        last[p] = t.node
    return edges


def dependency_graph(analysis: TxnAnalysis, specs: list[CycleSpec]) -> DepGraph:
    """The analysis's data edges, plus real-time edges when a cycle shape in `specs` needs
    them (they imply process order), else process edges when one needs those."""
    graph = DepGraph(len(analysis.txns))
    analysis.add_edges(graph)
    if any(s.name.endswith("-realtime") for s in specs):
        for a, b in realtime_edges(analysis.txns):
            graph.add(a, b, REALTIME)
    elif any(s.name.endswith("-process") for s in specs):
        for a, b in process_edges(analysis.txns):
            graph.add(a, b, PROCESS)
    return graph


def _explain_cycle(analysis: TxnAnalysis, kind: str, cycle: list[Step]) -> dict[str, Any]:
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
        # each step names its source transaction: which op it is and its micro-ops
        "cycle": [{"from": a, "rel": REL_NAMES[rel], "to": b, "op": op_ref(analysis.txns[a]),
                   "mops": mops_text(analysis.txns[a].mops, 80)} for a, rel, b in cycle],
        "text": "\n".join(lines),
    }


def _search_component(graph: DepGraph, comp: list[int], specs: list[CycleSpec], prohibited: set[str],
                      analysis: TxnAnalysis, found: Found, deadline: float | None, per_spec: float) -> None:
    """Name the cycles of one strongly connected component.

    First any cycle at all (cheap, so an invalid history is always reported as such), then
    each prohibited shape, most severe first, skipping shapes implied by ones already
    found here. Each shape gets `per_spec` seconds (Elle's per-SCC cycle-search timeout);
    running out of it is recorded and the search moves on. Running past the overall
    `deadline` raises SearchTimeout.
    """
    found_here: set[str] = set()
    witness = any_cycle(graph, comp, WW | WR | RW | PROCESS | REALTIME, deadline)
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


def search_cycles(graph: DepGraph, specs: list[CycleSpec], prohibited: set[str], analysis: TxnAnalysis,
                  found: Found, deadline: float | None, per_spec: float) -> list[list[int]]:
    """Record into `found` the prohibited cycles of every strongly connected component,
    smallest component first; when the overall `deadline` passes, record a
    cycle-search-timeout and stop. `specs`: the prohibited cycle shapes, in search order;
    `per_spec`: seconds per shape per component. Returns the components."""
    components = sorted(strongly_connected(graph, -1), key=len)
    for comp in components:
        try:
            _search_component(graph, comp, specs, prohibited, analysis, found, deadline, per_spec)
        except SearchTimeout:
            found.add("cycle-search-timeout", {
                "scc_size": len(comp),
                "text": f"the time limit ran out while searching a strongly connected component of "
                        f"{len(comp)} transactions ({len(components)} components in all)"})
            break
    return components


def verdict(kind: str, found: Found, prohibited: set[str], models: tuple[str, ...], anomalies: tuple[str, ...],
            transactions: int, stats: dict[str, Any]) -> CheckResult:
    """The result of a check that found `found`: invalid if an anomaly the requested
    `models` (and extra `anomalies`) prohibit was found, with the models it rules out;
    unknown if the search timed out or there was nothing to check; valid otherwise.
    Anomalies the models allow are only noted."""
    reportable = prohibited | UNKNOWN_TYPES
    types = sorted(t for t in found.cases if t in reportable)
    bad = [t for t in types if t in prohibited]
    valid: bool | str = False if bad else ("unknown" if types else True)
    not_models, also_not = boundary(bad) if bad else ([], [])
    reported = {t: found.cases[t][:MAX_CASES] for t in types}
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
            f"no anomaly prohibited by {', '.join(models) or 'the requested models'}"
            f"{' or ' + ', '.join(anomalies) if anomalies else ''} in {transactions} transactions")
    return CheckResult(valid, kind, types, reported, explanation, not_models, also_not, notes, stats)
