"""Which nodes and links a fault targets, after Jepsen's definitions (pure, no I/O).

Node specs (jepsen.nemesis.combined/db-nodes), for kill/pause/clock/disk:
    one        a random node
    minority   a random set of majority(n) - 1 nodes (fewer than half)
    majority   a random set of majority(n) nodes
    primaries  a random non-empty subset of the nodes the SUT says are primaries
    all        every node

Partition specs (jepsen.nemesis.combined/partition-specs), each a grudge: for every node
the set of nodes whose packets it drops. A grudge becomes the directed links src->dst
the gateway firewall drops.
    one              one random node cut off from the rest
    majority         random halves: floor(n/2) nodes against the others
    majorities-ring  every node sees a majority, no two see the same one (Jepsen's ring)
    minority-third   a random set of minority-third(n) nodes (< n/3) against the rest
    primaries        a random non-empty subset of the primaries, each alone, against the
                     non-primaries (primaries left out of the subset keep every link)
    bridge           two halves, with one node that still talks to both
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from mallory.errors import MalloryError

NODE_SPECS = ("one", "minority", "majority", "primaries", "all")
PARTITION_SPECS = ("one", "majority", "majorities-ring", "minority-third", "primaries", "bridge")

Grudge = dict[str, frozenset[str]]
Link = tuple[str, str]


def majority(n: int) -> int:
    return n // 2 + 1


def minority_third(n: int) -> int:
    """The largest integer strictly less than n/3 (Jepsen's util/minority-third)."""
    return (n - 1) // 3


def node_spec_size(spec: str, n: int) -> int | None:
    """How many nodes a spec picks among n (None: it depends on the SUT, `primaries`)."""
    sizes = {"one": 1, "minority": majority(n) - 1, "majority": majority(n), "all": n}
    if spec == "primaries":
        return None
    if spec not in sizes:
        raise MalloryError(f"unknown node spec {spec!r} (specs: {', '.join(NODE_SPECS)})")
    return sizes[spec]


def random_nonempty_subset(items: Sequence[str], rng: random.Random) -> list[str]:
    """Jepsen's random-nonempty-subset (empty only when `items` is), in the given order."""
    if not items:
        return []
    chosen = set(rng.sample(list(items), rng.randint(1, len(items))))
    return [x for x in items if x in chosen]


def pick_nodes(spec: str, nodes: Sequence[str], rng: random.Random, primaries: Sequence[str] = ()) -> list[str]:
    """The nodes a node spec targets, in cluster order."""
    if spec == "primaries":
        chosen = set(random_nonempty_subset([n for n in nodes if n in set(primaries)], rng))
    else:
        size = node_spec_size(spec, len(nodes))
        assert size is not None
        chosen = set(rng.sample(list(nodes), size))
    return [n for n in nodes if n in chosen]


def complete_grudge(components: Sequence[Sequence[str]]) -> Grudge:
    """Every node drops packets from every node of the other components."""
    everyone = [n for c in components for n in c]
    grudge: Grudge = {}
    for component in components:
        others = frozenset(n for n in everyone if n not in component)
        for node in component:
            grudge[node] = others
    return grudge


def bisect(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """Jepsen's bisect: the smaller half first."""
    half = len(nodes) // 2
    return list(nodes[:half]), list(nodes[half:])


def majorities_ring(shuffled: Sequence[str]) -> Grudge:
    """Jepsen's majorities-ring over nodes already in ring order: each node keeps the
    majority-sized window of the ring it sits in the middle of, and drops everyone else."""
    n = len(shuffled)
    m = majority(n)
    ring = list(shuffled) * 3
    grudge: Grudge = {}
    for start in range(n):
        window = ring[start : start + m]
        center = window[m // 2]
        grudge[center] = frozenset(x for x in shuffled if x not in window)
    return grudge


def bridge(shuffled: Sequence[str]) -> Grudge:
    """Jepsen's bridge: halves c1 and c2; the first node of c2 keeps talking to both."""
    c1, c2 = bisect(shuffled)
    link_node, rest = c2[0], c2[1:]
    grudge = complete_grudge([c1, rest])
    grudge[link_node] = frozenset()
    return grudge


def partition_grudge(spec: str, nodes: Sequence[str], rng: random.Random, primaries: Sequence[str] = ()) -> Grudge:
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    if spec == "one":
        return complete_grudge([shuffled[:1], shuffled[1:]])
    if spec == "majority":
        return complete_grudge(bisect(shuffled))
    if spec == "majorities-ring":
        return majorities_ring(shuffled)
    if spec == "minority-third":
        k = minority_third(len(nodes))
        return complete_grudge([shuffled[:k], shuffled[k:]])
    if spec == "primaries":
        chosen = random_nonempty_subset([n for n in nodes if n in set(primaries)], rng)
        rest = [n for n in nodes if n not in set(primaries)]
        return complete_grudge([*([p] for p in chosen), rest])
    if spec == "bridge":
        return bridge(shuffled)
    raise MalloryError(f"unknown partition spec {spec!r} (specs: {', '.join(PARTITION_SPECS)})")


def grudge_links(grudge: Grudge) -> list[Link]:
    """The directed links to drop: src->dst whenever dst holds a grudge against src."""
    return sorted((src, dst) for dst, srcs in grudge.items() for src in srcs)


def partition_degenerate(spec: str, n: int) -> str | None:
    """Why a partition spec cuts nothing on n nodes (None if it cuts something)."""
    if n < 2:
        return "a partition needs at least two nodes"
    if spec == "minority-third" and minority_third(n) == 0:
        return f"minority-third of {n} nodes is empty (needs at least 4 nodes)"
    if spec == "bridge" and n < 3:
        return "a bridge needs at least three nodes"
    if spec == "majorities-ring" and n < 3:
        return "a majorities ring needs at least three nodes"
    return None


def link_spec_links(spec: str, nodes: Sequence[str], rng: random.Random) -> list[Link]:
    """Links for packet faults: `one` = both directions of every link of one random node,
    `pair` = both directions between two random nodes, `all` = every link."""
    nodes = list(nodes)
    if len(nodes) < 2:
        raise MalloryError("packet faults need at least two nodes")
    if spec == "one":
        node = rng.choice(nodes)
        links = [(node, o) for o in nodes if o != node] + [(o, node) for o in nodes if o != node]
    elif spec == "pair":
        a, b = rng.sample(nodes, 2)
        links = [(a, b), (b, a)]
    elif spec == "all":
        links = [(a, b) for a in nodes for b in nodes if a != b]
    else:
        raise MalloryError(f"unknown link spec {spec!r} (specs: one, pair, all)")
    return sorted(links)
