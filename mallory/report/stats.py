"""Statistics for comparing campaigns (pure).

Vargha–Delaney Â12 is the effect size fuzzing papers report next to a Mann–Whitney test
(Arcuri & Briand's guidelines): the probability that a run of A scores higher than a run of
B, ties counting one half. 0.5 is no difference; above 0.5, A tends to be larger.
`mann_whitney_greater` is the one-sided test's p-value, computed as scipy's
`mannwhitneyu(a, b, alternative="greater")` does by default (a test holds it to scipy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def vargha_delaney_a12(a: Sequence[float], b: Sequence[float]) -> float:
    """Â12(A, B) = (#{a > b} + 0.5 · #{a = b}) / (|A| · |B|) over all pairs."""
    if not a or not b:
        raise ValueError("Vargha–Delaney Â12 needs at least one value in each group")
    wins = 0.0
    for x in a:
        for y in b:
            if x > y:
                wins += 1.0
            elif x == y:
                wins += 0.5
    return wins / (len(a) * len(b))


def mann_whitney_greater(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided Mann–Whitney U p-value for "runs of A score higher than runs of B".

    U counts the pairs (x in A, y in B) with x > y, ties one half. As scipy's default
    method: exact (the null distribution of U by counting arrangements) when one group has
    at most 8 values and nothing ties; otherwise the normal approximation with the
    tie correction and a continuity correction of one half."""
    if not a or not b:
        raise ValueError("a Mann–Whitney test needs at least one value in each group")
    m, n = len(a), len(b)
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    values = [*a, *b]
    tied = len(set(values)) != len(values)
    if min(m, n) <= 8 and not tied:
        counts = _u_distribution(m, n)
        return sum(counts[k] for k in range(math.ceil(u), len(counts))) / math.comb(m + n, m)
    total = m + n
    ties = {}
    for v in values:
        ties[v] = ties.get(v, 0) + 1
    tie_term = sum(c**3 - c for c in ties.values()) / (total * (total - 1))
    sigma = math.sqrt(m * n / 12 * ((total + 1) - tie_term))
    if sigma == 0:
        return 1.0
    z = (u - m * n / 2 - 0.5) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2))


def _u_distribution(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) orderings of two groups give U = 0 .. m*n."""
    # ways[i][j][u]: orderings of i values of A and j of B with U = u, built by where the
    # largest value comes from (from A, it beats all j values of B)
    ways = [[[1] + [0] * (m * n) for _ in range(n + 1)] for _ in range(m + 1)]
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            row = ways[i][j]
            for u in range(m * n + 1):
                row[u] = (ways[i - 1][j][u - j] if u >= j else 0) + ways[i][j - 1][u]
    return ways[m][n]


def a12_magnitude(a12: float) -> str:
    """Vargha and Delaney's thresholds on |Â12 − 0.5|: negligible, small, medium, large."""
    d = abs(a12 - 0.5)
    if d < 0.06:
        return "negligible"
    if d < 0.14:
        return "small"
    if d < 0.21:
        return "medium"
    return "large"


@dataclass(frozen=True)
class Spread:
    """Mean and spread of one quantity over seeds."""

    n: int
    mean: float
    low: float
    high: float
    std: float


def spread(values: Sequence[float]) -> Spread:
    """Mean, min, max and sample standard deviation (0 for a single value)."""
    if not values:
        raise ValueError("spread of no values")
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return Spread(n, mean, min(values), max(values), math.sqrt(var))
