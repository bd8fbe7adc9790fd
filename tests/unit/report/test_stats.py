"""Vargha–Delaney Â12 and spread against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mallory.report.stats import a12_magnitude, spread, vargha_delaney_a12


@pytest.mark.parametrize(
    "a, b, expected",
    [
        # every pair a tie: 9 halves / 9 pairs
        ([1, 2, 3], [1, 2, 3], 0.5),
        # A always larger / always smaller
        ([4, 5], [1, 2], 1.0),
        ([1, 2], [4, 5], 0.0),
        # 1<2: 0, 2=2: 0.5, 3>2: 1 -> 1.5 / 3
        ([1, 2, 3], [2], 0.5),
        # 3 beats 2,2,1 (3); 1 loses to 2,2 and ties 1 (0.5) -> 3.5 / 6
        ([3, 1], [2, 2, 1], 3.5 / 6),
        # 10 beats 5,4,3 not 20 (3), 5 beats 4,3 and ties 5 (2.5), 0 nothing -> 5.5 / 12
        ([10, 5, 0], [5, 4, 3, 20], 5.5 / 12),
    ],
)
def test_a12_hand_computed(a, b, expected):
    assert vargha_delaney_a12(a, b) == pytest.approx(expected)


@given(st.lists(st.integers(0, 20), min_size=1, max_size=8), st.lists(st.integers(0, 20), min_size=1, max_size=8))
def test_a12_is_complementary(a, b):
    assert vargha_delaney_a12(a, b) + vargha_delaney_a12(b, a) == pytest.approx(1.0)
    assert 0.0 <= vargha_delaney_a12(a, b) <= 1.0


def test_a12_needs_both_groups():
    with pytest.raises(ValueError):
        vargha_delaney_a12([], [1])


def test_magnitude_thresholds():
    assert a12_magnitude(0.5) == "negligible"
    assert a12_magnitude(0.6) == "small"
    assert a12_magnitude(0.3) == "medium"
    assert a12_magnitude(0.95) == "large"


def test_spread_hand_computed():
    s = spread([2, 4, 4, 4, 5, 5, 7, 9])
    assert (s.n, s.mean, s.low, s.high) == (8, 5.0, 2, 9)
    assert s.std == pytest.approx(math.sqrt(32 / 7))
    assert spread([3]).std == 0.0


def test_mann_whitney_matches_scipy_exact_and_asymptotic():
    import random

    from scipy.stats import mannwhitneyu

    from mallory.report.stats import mann_whitney_greater

    rng = random.Random(5)
    for _ in range(300):
        m, n = rng.randint(1, 12), rng.randint(1, 12)
        spread_of = rng.choice([3, 50, 10_000])  # few distinct values: ties; many: none
        a = [rng.randint(0, spread_of) for _ in range(m)]
        b = [rng.randint(0, spread_of) for _ in range(n)]
        expected = mannwhitneyu(a, b, alternative="greater").pvalue
        assert mann_whitney_greater(a, b) == pytest.approx(expected, rel=1e-9, abs=1e-12), (a, b)


def test_mann_whitney_on_separated_groups_of_four():
    from mallory.report.stats import mann_whitney_greater

    assert mann_whitney_greater([5, 6, 7, 8], [1, 2, 3, 4]) == pytest.approx(1 / 70)  # the most extreme of C(8,4)
    assert mann_whitney_greater([1, 2, 3, 4], [5, 6, 7, 8]) == 1.0
