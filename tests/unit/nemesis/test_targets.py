"""Jepsen's node and partition specs, checked against their definitions (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mallory.errors import MalloryError
from nemesis.faults.targets import (
    NODE_SPECS,
    PARTITION_SPECS,
    grudge_links,
    link_spec_links,
    majority,
    minority_third,
    partition_degenerate,
    partition_grudge,
    pick_nodes,
)

sizes = st.integers(min_value=1, max_value=15)
seeds = st.integers(min_value=0, max_value=2**32)


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def sees(grudge: dict, node: str, nodes: list[str]) -> set[str]:
    """Who `node` still hears from (itself included)."""
    return {x for x in nodes if x not in grudge.get(node, frozenset())}


@given(sizes, seeds)
def test_node_specs_pick_the_sizes_jepsen_picks(n, seed):
    nodes = names(n)
    rng = random.Random(seed)
    assert len(pick_nodes("one", nodes, rng)) == 1
    assert len(pick_nodes("minority", nodes, rng)) == majority(n) - 1 < n / 2 + 0.5
    maj = pick_nodes("majority", nodes, rng)
    assert len(maj) == majority(n) > n / 2 and set(maj) <= set(nodes)
    assert pick_nodes("all", nodes, rng) == nodes
    assert pick_nodes("primaries", nodes, rng, primaries=[nodes[-1]]) == [nodes[-1]]


def test_unknown_specs_are_errors():
    with pytest.raises(MalloryError, match="node spec"):
        pick_nodes("most", names(3), random.Random(0))
    with pytest.raises(MalloryError, match="partition spec"):
        partition_grudge("half", names(3), random.Random(0))
    with pytest.raises(MalloryError, match="link spec"):
        link_spec_links("some", names(3), random.Random(0))


@given(st.integers(min_value=3, max_value=15), seeds)
def test_one_cuts_a_single_node_off_both_ways(n, seed):
    nodes = names(n)
    grudge = partition_grudge("one", nodes, random.Random(seed))
    alone = [x for x in nodes if sees(grudge, x, nodes) == {x}]
    assert len(alone) == 1
    links = grudge_links(grudge)
    assert len(links) == 2 * (n - 1)
    assert all(alone[0] in link for link in links)


@given(st.integers(min_value=2, max_value=15), seeds)
def test_majority_splits_into_a_minority_and_a_majority(n, seed):
    nodes = names(n)
    grudge = partition_grudge("majority", nodes, random.Random(seed))
    components = {frozenset(sees(grudge, x, nodes)) for x in nodes}
    assert sorted(len(c) for c in components) == [n // 2, n - n // 2]
    # symmetric: a cut link is cut both ways
    links = set(grudge_links(grudge))
    assert all((b, a) in links for a, b in links)


@given(st.integers(min_value=3, max_value=15), seeds)
def test_majorities_ring_every_node_sees_a_distinct_majority(n, seed):
    nodes = names(n)
    grudge = partition_grudge("majorities-ring", nodes, random.Random(seed))
    views = [frozenset(sees(grudge, x, nodes)) for x in nodes]
    assert all(len(v) == majority(n) for v in views)
    assert len(set(views)) == n


@given(st.integers(min_value=4, max_value=15), seeds)
def test_minority_third_isolates_less_than_a_third(n, seed):
    nodes = names(n)
    grudge = partition_grudge("minority-third", nodes, random.Random(seed))
    components = sorted(len(frozenset(sees(grudge, x, nodes))) for x in nodes)
    assert components[0] == minority_third(n) < n / 3
    assert partition_degenerate("minority-third", n) is None


def test_minority_third_of_three_is_refused_not_enacted_as_nothing():
    assert "empty" in partition_degenerate("minority-third", 3)
    assert partition_degenerate("one", 1) is not None


@given(st.integers(min_value=3, max_value=15), seeds)
def test_bridge_keeps_one_node_talking_to_both_halves(n, seed):
    nodes = names(n)
    grudge = partition_grudge("bridge", nodes, random.Random(seed))
    bridges = [x for x in nodes if sees(grudge, x, nodes) == set(nodes)]
    assert len(bridges) == 1
    others = [x for x in nodes if x not in bridges]
    halves = {frozenset(sees(grudge, x, nodes)) - set(bridges) for x in others}
    assert len(halves) == 2 and frozenset.union(*halves) == frozenset(others)
    # everyone else still hears the bridge
    assert all(bridges[0] in sees(grudge, x, nodes) for x in others)


@given(seeds)
def test_primaries_a_nonempty_subset_each_alone(seed):
    nodes = names(5)
    grudge = partition_grudge("primaries", nodes, random.Random(seed), primaries=["n2", "n4"])
    cut = [p for p in ("n2", "n4") if grudge.get(p)]
    assert cut  # at least one primary isolated
    spared = {"n2", "n4"} - set(cut)  # a primary left out keeps every link
    for p in spared:
        assert sees(grudge, p, nodes) == set(nodes) and all(p in sees(grudge, x, nodes) for x in nodes)
    for p in cut:  # each chosen primary hears only itself and the spared
        assert sees(grudge, p, nodes) == {p} | spared
    assert sees(grudge, "n1", nodes) == {"n1", "n3", "n5"} | spared
    assert grudge_links(partition_grudge("primaries", nodes, random.Random(1), primaries=[])) == []
    picked = pick_nodes("primaries", nodes, random.Random(seed), ["n2", "n4"])
    assert picked and set(picked) <= {"n2", "n4"}


@given(st.integers(min_value=2, max_value=10), seeds)
def test_link_specs(n, seed):
    nodes = names(n)
    one = link_spec_links("one", nodes, random.Random(seed))
    assert len(one) == 2 * (n - 1)
    pair = link_spec_links("pair", nodes, random.Random(seed))
    assert len(pair) == 2 and pair[0] == pair[1][::-1]
    assert len(link_spec_links("all", nodes, random.Random(seed))) == n * (n - 1)


def test_same_seed_same_targets():
    for spec in PARTITION_SPECS:
        if spec == "primaries":
            continue
        a = partition_grudge(spec, names(5), random.Random(7))
        assert a == partition_grudge(spec, names(5), random.Random(7))
    for spec in NODE_SPECS:
        assert pick_nodes(spec, names(5), random.Random(3), ["n1"]) == pick_nodes(spec, names(5), random.Random(3), ["n1"])
