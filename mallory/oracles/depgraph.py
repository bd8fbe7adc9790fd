"""The transaction dependency graph: edges labelled ww / wr / rw / process / realtime,
strongly connected components (iterative Tarjan: no recursion limit on 100k ops), and the
search for a cycle of a given anomaly shape inside one component.

A cycle shape (`CycleSpec`) says which edge kinds the cycle may use, how its rw
(anti-dependency) edges must appear (none; exactly one; at least two, never adjacent; at
least two with an adjacent pair) and which kinds must appear at least once. The search is
a breadth-first search over (transaction, path-state) pairs, started from each edge of the
rarest required kind, so the witness it returns is a shortest cycle of that shape through
that edge. It honours a deadline and raises `SearchTimeout` when it runs out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

WW, WR, RW, PROCESS, REALTIME = 1, 2, 4, 8, 16
DATA = WW | WR | RW
REL_NAMES = {WW: "ww", WR: "wr", RW: "rw", PROCESS: "process", REALTIME: "realtime"}


class SearchTimeout(Exception):
    """The cycle search ran past its deadline."""


class DepGraph:
    """A directed graph over transaction numbers 0..n-1, each edge a bitmask of relations."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.out: list[dict[int, int]] = [{} for _ in range(n)]

    def add(self, a: int, b: int, rel: int) -> None:
        if a == b:
            return
        row = self.out[a]
        row[b] = row.get(b, 0) | rel

    def edges(self) -> Iterator[tuple[int, int, int]]:
        for a, row in enumerate(self.out):
            for b, mask in row.items():
                yield a, b, mask

    def edge_count(self) -> int:
        return sum(len(row) for row in self.out)


def strongly_connected(graph: DepGraph, mask: int, nodes: Iterable[int] | None = None,
                       singletons: bool = False) -> list[list[int]]:
    """Components with more than one node (every component with `singletons`), of the
    subgraph of edges intersecting `mask` (restricted to `nodes` when given). Iterative
    Tarjan, so components come out in reverse topological order: sinks first."""
    out = graph.out
    allowed: set[int] | None = set(nodes) if nodes is not None else None
    order = list(allowed) if allowed is not None else range(graph.n)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    result: list[list[int]] = []
    counter = 0
    for root in order:
        if root in index:
            continue
        work: list[tuple[int, Iterator[tuple[int, int]]]] = [(root, iter(out[root].items()))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w, m in it:
                if not m & mask or (allowed is not None and w not in allowed):
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(out[w].items())))
                    advanced = True
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[v] < low[parent]:
                    low[parent] = low[v]
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if singletons or len(component) > 1:
                    result.append(component)
    return result


class Reachability:
    """Which nodes can reach which through edges intersecting `mask`, inside `nodes`:
    one bitset of reachable components per component of the condensation."""

    def __init__(self, graph: DepGraph, mask: int, nodes: set[int]) -> None:
        comps = strongly_connected(graph, mask, nodes, singletons=True)
        self.comp_of: dict[int, int] = {}
        for i, comp in enumerate(comps):
            for v in comp:
                self.comp_of[v] = i
        self.reach: list[int] = []
        out, comp_of = graph.out, self.comp_of
        for i, comp in enumerate(comps):  # sinks first: successors are already done
            bits = 1 << i
            for v in comp:
                for w, m in out[v].items():
                    if m & mask and w in nodes:
                        j = comp_of[w]
                        if j != i:
                            bits |= self.reach[j]
            self.reach.append(bits)

    def reaches(self, a: int, b: int) -> bool:
        """Is there a path from a to b (or a == b's component)?"""
        return bool(self.reach[self.comp_of[a]] >> self.comp_of[b] & 1)


NO_RW, SINGLE_RW, NONADJACENT_RW, ADJACENT_RW = "none", "single", "nonadjacent", "adjacent"


@dataclass(frozen=True)
class CycleSpec:
    name: str
    rels: int  # edge kinds the cycle may use
    rw: str  # one of NO_RW, SINGLE_RW, NONADJACENT_RW, ADJACENT_RW
    required: tuple[int, ...] = ()  # kinds that must each appear at least once


def _base_specs() -> list[CycleSpec]:
    # Every rw edge here is an anti-dependency on a key (there are no predicate reads), so
    # the rw cycles carry Elle's -item names; asking for G-single or G-nonadjacent finds
    # them through the anomalies that imply those (consistency.IMPLIED_ANOMALIES).
    return [
        CycleSpec("G0", WW, NO_RW),
        CycleSpec("G1c", WW | WR, NO_RW, (WR,)),
        CycleSpec("G-single-item", WW | WR | RW, SINGLE_RW),
        CycleSpec("G-nonadjacent-item", WW | WR | RW, NONADJACENT_RW),
        CycleSpec("G2-item", WW | WR | RW, ADJACENT_RW),
    ]


def cycle_specs() -> list[CycleSpec]:
    """All cycle shapes in search order: data-only first, then -process, then -realtime."""
    base = _base_specs()
    out = list(base)
    for variant, bit in (("process", PROCESS), ("realtime", REALTIME)):
        out.extend(CycleSpec(f"{s.name}-{variant}", s.rels | bit, s.rw, s.required + (bit,)) for s in base)
    return out


Step = tuple[int, int, int]  # (from, relation bit used, to)


def classify(cycle: list[Step]) -> str:
    """Name a cycle the way Elle's explainer does, from the relations its edges use. Every
    rw edge is on a key, so an rw cycle is G-single-item, G-nonadjacent-item or G2-item,
    never Elle's predicate G-single, G-nonadjacent or G2."""
    rels = [r for _, r, _ in cycle]
    n_rw = rels.count(RW)
    if n_rw == 0:
        base = "G1c" if WR in rels else "G0"
    elif n_rw == 1:
        base = "G-single-item"
    else:
        adjacent = any(rels[i] == RW and rels[i - 1] == RW for i in range(len(rels)))
        base = "G2-item" if adjacent else "G-nonadjacent-item"
    if REALTIME in rels:
        return base + "-realtime"
    if PROCESS in rels:
        return base + "-process"
    return base


class _Search:
    """Shortest-cycle BFS over (node, path-state) for one CycleSpec inside one component."""

    def __init__(self, graph: DepGraph, nodes: set[int], spec: CycleSpec, deadline: float | None) -> None:
        self.out = graph.out
        self.nodes = nodes
        self.spec = spec
        self.deadline = deadline
        self.req_mask = 0
        for bit in spec.required:
            self.req_mask |= bit
        self.req_all = self.req_mask
        self.rw_allowed = spec.rw != NO_RW and bool(spec.rels & RW)
        self.plain = spec.rels & ~RW
        self.pops = 0

    # path state: last_rw (bit 0), number of rw edges capped at 2 (bits 1-2), adjacent rw
    # pair seen (bit 3), required kinds seen (bits 4+, as the relation bits shifted by 4).
    def _moves(self, flags: int, mask: int) -> Iterator[tuple[int, int]]:
        """(relation used, new flags) for following an edge with relation `mask`."""
        plain = mask & self.plain
        if plain:
            # Use the most useful plain relation: one still required, else any.
            wanted = plain & self.req_mask
            bit = wanted & -wanted if wanted else plain & -plain
            yield bit, (flags & ~1) | ((plain & self.req_mask) << 4)
        if mask & RW and self.rw_allowed:
            last_rw = flags & 1
            n_rw = (flags >> 1) & 3
            mode = self.spec.rw
            if mode == SINGLE_RW and n_rw >= 1:
                return
            if mode == NONADJACENT_RW and last_rw:
                return
            adj = (flags >> 3) & 1 | last_rw
            n_rw = min(n_rw + 1, 2)
            yield RW, (flags & ~0xF) | 1 | (n_rw << 1) | (adj << 3) | ((RW & self.req_mask) << 4)

    def _accepts(self, flags: int, first_rw: bool) -> bool:
        if (flags >> 4) & self.req_all != self.req_all:
            return False
        n_rw = (flags >> 1) & 3
        last_rw = flags & 1
        mode = self.spec.rw
        if mode == NO_RW:
            return n_rw == 0
        if mode == SINGLE_RW:
            return n_rw == 1
        wrap = bool(last_rw) and first_rw
        if mode == NONADJACENT_RW:
            return n_rw == 2 and not wrap
        return n_rw == 2 and (bool((flags >> 3) & 1) or wrap)

    def from_edge(self, a: int, b: int, rel: int, flags: int) -> list[Step] | None:
        """Shortest cycle a -rel-> b -> ... -> a of this shape, or None."""
        out, nodes = self.out, self.nodes
        first_rw = rel == RW
        start = (b, flags)
        if b == a:
            return None
        parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
        queue = deque([start])
        while queue:
            self.pops += 1
            if self.pops & 0x3FF == 0 and self.deadline is not None and time.monotonic() > self.deadline:
                raise SearchTimeout
            state = queue.popleft()
            u, fl = state
            for v, mask in out[u].items():
                if v not in nodes or not mask & self.spec.rels:
                    continue
                for used, nfl in self._moves(fl, mask):
                    if v == a:
                        if self._accepts(nfl, first_rw):
                            path: list[Step] = [(u, used, a)]
                            cur = state
                            while True:
                                link = parent[cur]
                                if link is None:
                                    break
                                prev, prel = link
                                path.append((prev[0], prel, cur[0]))
                                cur = prev
                            path.append((a, rel, b))
                            path.reverse()
                            return path
                        continue
                    nxt = (v, nfl)
                    if nxt not in parent:
                        parent[nxt] = (state, used)
                        queue.append(nxt)
        return None

    def initial_flags(self, rel: int) -> int:
        if rel == RW:
            return 1 | (1 << 1) | ((RW & self.req_mask) << 4)
        return (rel & self.req_mask) << 4


def find_cycle(graph: DepGraph, component: list[int], spec: CycleSpec, deadline: float | None) -> list[Step] | None:
    """A cycle of shape `spec` inside `component`, or None. Raises SearchTimeout."""
    nodes = set(component)
    # Only nodes strongly connected through the allowed relations can hold such a cycle.
    sub_components = strongly_connected(graph, spec.rels, nodes)
    if not sub_components:
        return None
    search = _Search(graph, nodes, spec, deadline)
    if spec.rw != NO_RW:
        first = RW
    elif len(spec.required) > 1:
        first = spec.required[-1]  # the process/realtime bit: rarer than wr
    elif spec.required:
        first = spec.required[0]
    else:
        first = spec.rels & -spec.rels
    for sub in sub_components:
        members = set(sub)
        search.nodes = members
        # A single-rw cycle through rw edge a -> b needs a path back from b to a without rw.
        back = Reachability(graph, spec.rels & ~RW, members) if spec.rw == SINGLE_RW else None
        for a in sub:
            for b, mask in graph.out[a].items():
                if b not in members or not mask & first:
                    continue
                if back is not None and not back.reaches(b, a):
                    continue
                cycle = search.from_edge(a, b, first, search.initial_flags(first))
                if cycle is not None and classify(cycle) == spec.name:
                    return cycle
    return None


_LABEL_ORDER = (WW, WR, RW, PROCESS, REALTIME)


def any_cycle(graph: DepGraph, component: list[int], rels: int, deadline: float | None) -> list[Step]:
    """A shortest cycle through the component's first node, whatever its shape: the
    fallback witness that a strongly connected component is not serializable. Each edge
    is labelled with its first relation in ww, wr, rw, process, realtime order."""
    nodes = set(component)
    start = component[0]
    out = graph.out
    parent: dict[int, tuple[int, int]] = {}
    queue = deque([start])
    pops = 0
    while queue:
        pops += 1
        if pops & 0x3FF == 0 and deadline is not None and time.monotonic() > deadline:
            raise SearchTimeout
        u = queue.popleft()
        for v, mask in out[u].items():
            mask &= rels
            if not mask or v not in nodes:
                continue
            label = next(bit for bit in _LABEL_ORDER if mask & bit)
            if v == start:
                path: list[Step] = [(u, label, start)]
                cur = u
                while cur != start:
                    prev, rel = parent[cur]
                    path.append((prev, rel, cur))
                    cur = prev
                path.reverse()
                return path
            if v not in parent:
                parent[v] = (u, label)
                queue.append(v)
    raise AssertionError("a strongly connected component always holds a cycle")
