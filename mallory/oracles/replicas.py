"""Oracles over what the replicas of a consensus system say of themselves (pure): safety
violations that clients may never see.

- replica divergence: two nodes applied different commands up to one log index (their
  digests of the commands applied up to it differ). What each node applied comes from the
  SUT (`mallory.harness.adapter.ReportsApplied`: for raft-kv and pysyncobj a hash chain
  over the applied commands); one finding, at the lowest index where digests differ.
- two leaders in one term: two nodes logged that they became leader in the same term
  (Raft's election safety). The line a node logs is the SUT's (a regex with a `term`
  group, from its spec); one finding per such term.

Both are signed by their class alone: which nodes, indexes and terms vary from sighting to
sighting of one bug.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from mallory.oracles.triage import Finding

ORACLE = "replicas"
DIVERGENCE = "divergence"
TWO_LEADERS = "two-leaders-in-a-term"


def divergence_findings(digests: Mapping[str, Mapping[int, str]]) -> list[Finding]:
    """`digests`: node -> {log index: digest of the commands it applied up to that index}.
    A finding when two nodes give different digests for one index (the lowest such index,
    with every node's digest there); none when the nodes agree wherever they overlap."""
    by_index: dict[int, dict[str, str]] = {}
    for node, applied in digests.items():
        for index, digest in applied.items():
            by_index.setdefault(index, {})[node] = digest
    for index in sorted(by_index):
        there = by_index[index]
        if len(set(there.values())) > 1:
            said = ", ".join(f"{node} {digest}" for node, digest in sorted(there.items()))
            message = f"replicas applied different commands up to log index {index}: {said}"
            details = {"index": index, "digests": dict(sorted(there.items())),
                       "applied": {n: {str(i): d for i, d in sorted(a.items())} for n, a in sorted(digests.items())}}
            return [Finding(ORACLE, DIVERGENCE, (), message, None, details)]
    return []


def leader_terms(log: str, leader_line: re.Pattern[str]) -> list[int]:
    """The terms of the lines of `log` where its node says it became leader (`leader_line`
    matches such a line; its group `term` is the term), in log order."""
    return [int(m.group("term")) for line in log.splitlines() if (m := leader_line.search(line))]


def two_leaders_findings(terms: Mapping[str, Iterable[int]]) -> list[Finding]:
    """`terms`: node -> the terms it became leader in. A finding per term two or more nodes
    led in, naming them."""
    leaders: dict[int, set[str]] = {}
    for node, led in terms.items():
        for term in led:
            leaders.setdefault(term, set()).add(node)
    return [
        Finding(ORACLE, TWO_LEADERS, (), f"two leaders in term {term}: {', '.join(sorted(nodes))}", None,
                {"term": term, "leaders": sorted(nodes)})
        for term, nodes in sorted(leaders.items())
        if len(nodes) > 1
    ]
