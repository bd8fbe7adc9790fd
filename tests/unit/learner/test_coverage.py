"""Event-pair coverage against a reference: a plain multiset of the windows' pair sets."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.learner.checkpoint import CheckpointError
from mallory.learner.coverage import PairCoverage, PairsSeen

PAIRS = [f"{a}>{b}" for a in "abcdef" for b in "abcdef"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), windows=st.integers(0, 40))
def test_coverage_counts_windows_per_pair_and_reports_what_each_added(seed, windows):
    rng = random.Random(seed)
    coverage, reference = PairCoverage(), Counter()
    for _ in range(windows):
        window = [rng.choice(PAIRS) for _ in range(rng.randint(0, 8))]  # duplicates count once
        before = set(reference)
        reference.update(set(window))
        seen = coverage.add(window)
        distinct = set(window)
        assert seen == PairsSeen(
            pairs=len(distinct),
            new=len(distinct - before),
            rarest=min((reference[p] for p in distinct), default=0),
        )
    assert coverage.counts == dict(reference) and len(coverage) == len(reference)
    restored = PairCoverage.from_state(coverage.to_state())
    assert restored.counts == coverage.counts


@pytest.mark.parametrize("state", [{"counts": [["a>b", 0]]}, {"counts": [["a>b"]]}, {"counts": [[1, 2]]}, {}])
def test_a_corrupt_coverage_checkpoint_is_refused(state):
    with pytest.raises(CheckpointError, match="coverage"):
        PairCoverage.from_state(state)
