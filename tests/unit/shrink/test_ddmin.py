"""ddmin against deterministic fake oracles: the result still fails, keeps the input's
order, and is 1-minimal (removing any one item loses the failure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.shrink.ddmin import ddmin


def fake_needs(required: frozenset[int]):
    """A fake oracle: fails when every required item is present (a bug that needs a
    specific set of faults)."""
    calls: list[list[int]] = []

    def fails(candidate: list[int]) -> bool:
        calls.append(candidate)
        return required <= set(candidate)

    return fails, calls


def is_subsequence(small: list, big: list) -> bool:
    it = iter(big)
    return all(x in it for x in small)


@st.composite
def items_and_required(draw):
    items = draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=24, unique=True))
    required = draw(st.lists(st.sampled_from(items), min_size=1, max_size=min(5, len(items)), unique=True))
    return items, frozenset(required)


@settings(max_examples=300, deadline=None)
@given(items_and_required(), st.booleans())
def test_monotone_oracle_shrinks_to_exactly_the_required_items(case, subsets):
    items, required = case
    fails, calls = fake_needs(required)
    result = ddmin(items, fails, subsets=subsets)
    assert set(result) == required
    assert is_subsequence(result, items)
    assert len(calls) == len({tuple(c) for c in calls}), "a candidate was asked twice"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=20), st.integers(0, 2**32 - 1), st.booleans())
def test_any_deterministic_oracle_gives_a_failing_1_minimal_subsequence(items, salt, subsets):
    """A non-monotone fake: fails by a hash of the candidate (so a subset may fail where its
    superset passes), and always on the whole input."""
    whole = tuple(items)

    def fails(candidate: list[int]) -> bool:
        return tuple(candidate) == whole or hash((salt, tuple(candidate))) % 3 == 0

    result = ddmin(items, fails, subsets=subsets)
    assert fails(result)
    assert is_subsequence(result, items)
    if len(result) >= 2:
        for i in range(len(result)):
            assert not fails(result[:i] + result[i + 1 :]), (result, i)


def test_equal_items_are_kept_apart():
    """Two identical steps (kill:one twice) are two items: the bug may need both."""
    items = ["noop", "kill:one", "noop", "kill:one", "noop"]
    result = ddmin(items, lambda c: c.count("kill:one") >= 2, subsets=False)
    assert result == ["kill:one", "kill:one"]


def test_complements_only_asks_fewer_questions_when_the_bug_needs_several_items():
    items = list(range(16))
    required = frozenset({2, 7, 11})
    with_subsets, calls_a = fake_needs(required)
    without, calls_b = fake_needs(required)
    assert set(ddmin(items, with_subsets)) == set(ddmin(items, without, subsets=False)) == required
    assert len(calls_b) < len(calls_a)
