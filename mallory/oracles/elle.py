"""An Elle-style transactional checker for list-append and rw-register histories: the
entry point, `check_elle(history, "list-append" | "rw-register", ElleOptions(...))`.

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
   shape (G0, G1c, G-single-item, G-nonadjacent-item, G2-item and their -process /
   -realtime variants), most severe first, each witness explained in words. Every rw edge
   is on a key, so the rw cycles carry Elle's -item names; asking for G-single or
   G-nonadjacent (directly or through a model) searches for the -item cycles that imply them.

The verdict: invalid if any anomaly the requested models prohibit was found; unknown if
the cycle search ran out of time (or there was nothing to check); valid otherwise.

Steps 2 and 3, and the edges of step 4 that come from them, are the workload's
(`list_append`, `rw_register`); the rest is shared (`txn`), and the graph search is
`depgraph`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mallory.errors import MalloryError
from mallory.history.ops import Op
from mallory.oracles.consistency import prohibited_anomalies
from mallory.oracles.depgraph import cycle_specs
from mallory.oracles.list_append import ListAppendAnalysis
from mallory.oracles.result import CheckResult
from mallory.oracles.rw_register import RwRegisterAnalysis
from mallory.oracles.txn import (
    Found,
    TxnAnalysis,
    dependency_graph,
    prepare,
    search_cycles,
    verdict,
)


@dataclass
class ElleOptions:
    """What a check looks for (the anomalies the expected models prohibit, plus any named
    in `anomalies`), how long it may search, and where rw-register's version orders come from."""

    consistency_models: tuple[str, ...] = ("strict-serializable",)
    anomalies: tuple[str, ...] = ()
    time_limit: float | None = None  # seconds for the whole cycle search
    cycle_search_timeout: float = 1.0  # seconds per anomaly shape per component, as Elle
    wfr_keys: bool = False  # rw-register: writes follow reads within a txn
    sequential_keys: bool = False  # rw-register: per-key process order orders versions
    linearizable_keys: bool = False  # rw-register: per-key real-time order orders versions


def check_elle(history: list[Op], kind: str, opts: ElleOptions | None = None, source: str = "<history>") -> CheckResult:
    """Check a list-append or rw-register history (`kind`); see the module doc. `source`
    names the history in error messages; raises MalloryError for an unknown kind or a
    history that is not of that workload."""
    if kind not in ("list-append", "rw-register"):
        raise MalloryError(f"unknown transactional workload {kind!r}; known: list-append, rw-register")
    opts = opts or ElleOptions()
    prohibited = prohibited_anomalies(opts.consistency_models, opts.anomalies)
    started = time.monotonic()
    deadline = None if opts.time_limit is None else started + opts.time_limit
    found = Found()
    analysis: TxnAnalysis
    if kind == "list-append":
        txns, failed = prepare(history, ListAppendAnalysis, source)
        analysis = ListAppendAnalysis(txns, failed, found)
    else:
        txns, failed = prepare(history, RwRegisterAnalysis, source)
        analysis = RwRegisterAnalysis(txns, failed, found, wfr_keys=opts.wfr_keys,
                                      sequential_keys=opts.sequential_keys, linearizable_keys=opts.linearizable_keys)
    specs = [s for s in cycle_specs() if s.name in prohibited]
    graph = dependency_graph(analysis, specs)
    if not any(t.status == "ok" for t in txns):
        found.add("empty-transaction-graph", {"text": "no transaction completed ok: there is nothing to check"})
    inferred_at = time.monotonic()
    components = search_cycles(graph, specs, prohibited, analysis, found, deadline, opts.cycle_search_timeout)
    stats = {
        "transactions": len(txns),
        "failed": len(failed),
        "edges": graph.edge_count(),
        "sccs": len(components),
        "largest_scc": max((len(c) for c in components), default=0),
        "inference_seconds": round(inferred_at - started, 3),
        "cycle_search_seconds": round(time.monotonic() - inferred_at, 3),
    }
    return verdict(kind, found, prohibited, opts.consistency_models, opts.anomalies, len(txns), stats)
