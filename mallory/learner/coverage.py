"""Cumulative event-pair coverage: AFL's edge coverage for a distributed system.

AFL counts the edges (a, b) between basic blocks ever taken, over the whole campaign; a
test case that takes a new edge is interesting. Here the "edges" are the happens-before
pairs "a>b" of code and log events that a window showed (mallory/timeline/abstraction.py
`coverage_pairs`: which event types led to which, across nodes), and the campaign keeps
every pair it has seen with how many windows showed it. Unlike distinct states, coverage
does not depend on the state abstraction or the similarity threshold, so it compares
campaigns of different settings on equal terms.

    seen = coverage.add(window_pairs)   # -> PairsSeen: new pairs, the rarest pair's count
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mallory.learner import checkpoint as ckpt


@dataclass(frozen=True)
class PairsSeen:
    """What one window added to the coverage.

    pairs:  distinct pairs in the window;
    new:    how many of them no earlier window showed;
    rarest: the lowest count among them after this window (1 when one is new; 0 when the
            window showed no pair).
    """

    pairs: int
    new: int
    rarest: int


class PairCoverage:
    """The pairs seen so far, each with the number of windows that showed it."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, pairs: Iterable[str]) -> PairsSeen:
        window = set(pairs)
        new, rarest = count_keys(self.counts, window)
        return PairsSeen(len(window), new, rarest)

    def to_state(self) -> dict[str, Any]:
        return {"counts": sorted([pair, count] for pair, count in self.counts.items())}

    @classmethod
    def from_state(cls, state: Any, where: str = "coverage") -> PairCoverage:
        coverage = cls()
        for i, row in enumerate(ckpt.field(state, "counts", list, where)):
            if (
                not isinstance(row, list)
                or len(row) != 2
                or not isinstance(row[0], str)
                or isinstance(row[1], bool)
                or not isinstance(row[1], int)
                or row[1] < 1
            ):
                raise ckpt.CheckpointError(f"{where}.counts[{i}] is not [pair, positive count]")
            coverage.counts[row[0]] = row[1]
        return coverage


def count_keys(counts: dict[str, int], keys: Iterable[str]) -> tuple[int, int]:
    """Count each of `keys` once more in `counts`; how many were new, and the
    lowest count among them after this (0 for no keys)."""
    new = 0
    lowest = 0
    for key in keys:
        count = counts.get(key, 0) + 1
        counts[key] = count
        new += count == 1
        lowest = count if lowest == 0 else min(lowest, count)
    return new, lowest
