"""Statistics for comparing campaigns (pure).

Vargha–Delaney Â12 is the effect size fuzzing papers report next to a Mann–Whitney test
(Arcuri & Briand's guidelines): the probability that a run of A scores higher than a run of
B, ties counting one half. 0.5 is no difference; above 0.5, A tends to be larger.
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
