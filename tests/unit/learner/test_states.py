import random

import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.learner.states import StateStore
from tests.unit.learner.summaries import jaccard, random_summary, with_jaccard

tokens = st.text(min_size=1, max_size=30)
summaries = st.frozensets(tokens, max_size=60)


@pytest.mark.parametrize("num_perm,seed", [(128, 1), (64, 7), (256, 42)])
def test_signature_is_datasketch_minhash(num_perm, seed):
    rng = random.Random(seed)
    store = StateStore(num_perm=num_perm, seed=seed)
    for size in (0, 1, 20, 150):
        summary = random_summary(rng, size)
        reference = MinHash(num_perm=num_perm, seed=seed)
        reference.update_batch([t.encode("utf-8") for t in summary])
        assert np.array_equal(store.signature(summary), reference.hashvalues)
        # the token cache must not change the answer the second time
        assert np.array_equal(store.signature(summary), reference.hashvalues)


@settings(max_examples=60, deadline=None)
@given(summary=summaries)
def test_identical_summaries_are_the_same_state(summary):
    store = StateStore()
    first = store.lookup(summary)
    again = store.lookup(list(reversed(sorted(summary))))
    assert first.is_new and first.visits == 1 and first.state_id == 0
    assert (again.state_id, again.is_new, again.similarity, again.visits) == (first.state_id, False, 1.0, 2)
    assert len(store) == 1


def test_empty_summary_is_one_deterministic_state():
    a, b = StateStore(), StateStore()
    a.lookup(random_summary(random.Random(1), 50))
    empty_a = a.lookup(frozenset())
    assert empty_a.is_new and empty_a.state_id == 1
    assert a.lookup([]) == type(empty_a)(1, False, 1.0, 2)
    assert np.array_equal(a.signature(()), b.signature(iter(())))
    assert b.lookup(frozenset()).state_id == 0 and not b.lookup(()).is_new


def test_dissimilar_summaries_are_different_states():
    rng = random.Random(5)
    store = StateStore(threshold=0.7)
    pairs = 0
    for _ in range(150):
        base = random_summary(rng, rng.randrange(20, 200))
        other = with_jaccard(rng, base, 0.35)
        assert jaccard(base, other) < 0.45
        a, b = store.lookup(base), store.lookup(other)
        assert a.is_new and b.is_new and a.state_id != b.state_id
        pairs += 1
    assert len(store) == 2 * pairs


def test_similar_summaries_are_the_same_state():
    rng = random.Random(6)
    store = StateStore(threshold=0.7)
    merged = 0
    trials = 200
    for _ in range(trials):
        base = random_summary(rng, rng.randrange(20, 200))
        near = with_jaccard(rng, base, 0.9)
        a, b = store.lookup(base), store.lookup(near)
        merged += (not b.is_new) and b.state_id == a.state_id
    # estimated Jaccard at true 0.9 with 128 permutations falls under 0.7 with negligible
    # probability; LSH misses a candidate at 0.9 with probability ~1e-9
    assert merged == trials


def test_new_state_joins_the_nearest_stored_state():
    rng = random.Random(8)
    store = StateStore(threshold=0.5)
    base = sorted(random_summary(rng, 120))
    fresh = sorted(random_summary(rng, 48))
    # far drops base[:35] (Jaccard to base 85/155 = 0.55), near drops base[35:48] (0.82);
    # they drop different tokens, so far and near are only 72/168 = 0.43 alike
    far = frozenset(base[35:] + fresh[:35])
    near = frozenset(base[:35] + base[48:] + fresh[35:])
    assert jaccard(far, near) < 0.45 and jaccard(near, frozenset(base)) > jaccard(far, frozenset(base)) > 0.5
    far_id = store.lookup(far).state_id
    near_id = store.lookup(near).state_id
    assert far_id != near_id
    match = store.lookup(base)
    assert match.state_id == near_id and not match.is_new
    assert match.similarity == np.count_nonzero(store.signatures[near_id] == store.signature(base)) / 128


def linear_nearest(store: StateStore, signature: np.ndarray) -> int:
    """The reference: exact nearest stored state over ALL signatures (ties: lowest id)."""
    matches = np.count_nonzero(store.signatures == signature, axis=1)
    best = matches.max()
    return int(np.flatnonzero(matches == best)[0]) if best >= store.min_matches else -1


def variants(rng: random.Random, base: frozenset[str], drops: list[float]) -> list[frozenset[str]]:
    """Variants of base that each replace a different, disjoint slice of it with fresh
    tokens: each is close to base, further from the others."""
    tokens = sorted(base)
    rng.shuffle(tokens)
    out, start = [], 0
    for drop in drops:
        cut = round(drop * len(tokens))
        out.append(frozenset(tokens[:start] + tokens[start + cut :]) | random_summary(rng, cut))
        start += cut
    return out


def test_lsh_nearest_equals_linear_scan_nearest():
    rng = random.Random(11)
    store = StateStore(threshold=0.7)
    # families of related states: members overlap at Jaccard ~0.5, below the threshold,
    # so every family contributes several close-but-distinct states
    stored = []
    for _ in range(150):
        family = random_summary(rng, rng.randrange(20, 200))
        for _ in range(8):
            member = with_jaccard(rng, family, 0.65)
            store.lookup(member)
            stored.append(member)
    # clusters whose variants are ~0.67-0.7 alike (mostly distinct states) while their
    # common base is 0.79-0.85 alike to each: querying the base, the NEAREST one must win
    bases = []
    for _ in range(100):
        base = random_summary(rng, rng.randrange(100, 200))
        for variant in variants(rng, base, [0.08, 0.1, 0.12]):
            store.lookup(variant)
        bases.append(base)
    assert len(store) > 1300
    queries = [with_jaccard(rng, rng.choice(stored), rng.choice([0.8, 0.9, 0.95])) for _ in range(400)]
    queries += [with_jaccard(rng, rng.choice(stored), 0.4) for _ in range(100)]
    queries += [random_summary(rng, 50) for _ in range(50)]
    queries += bases
    found = new = contested = 0
    for query in queries:
        signature = store.signature(query)
        expected = linear_nearest(store, signature)
        answer = store.peek_signature(signature)
        assert (-1 if answer.is_new else answer.state_id) == expected
        found += expected >= 0
        new += expected < 0
        contested += np.count_nonzero(np.count_nonzero(store.signatures == signature, axis=1) >= store.min_matches) > 1
    # all kinds of answer were exercised, including queries with several states in reach
    assert found >= 400 and new >= 100 and contested >= 50


def test_peek_records_nothing_and_lookup_counts_visits():
    rng = random.Random(3)
    store = StateStore()
    a, b = random_summary(rng, 40), random_summary(rng, 40)
    assert store.peek(a) == type(store.peek(a))(0, True, 0.0, 0)
    assert len(store) == 0
    assert store.lookup(a).state_id == 0
    assert store.peek(b).state_id == 1 and store.peek(b).is_new
    assert store.lookup(b).state_id == 1
    for _ in range(3):
        store.lookup(a)
    peeked = store.peek(a)
    assert (peeked.state_id, peeked.is_new, peeked.visits) == (0, False, 4)
    assert store.visit_counts == (4, 1) and store.visits(1) == 1 and len(store) == 2


def test_lsh_bands_are_tuned_for_recall():
    bands, rows = StateStore(threshold=0.7).lsh_params
    assert bands * rows <= 128
    candidate = lambda s: 1 - (1 - s**rows) ** bands  # noqa: E731
    assert candidate(0.7) >= 0.98 and candidate(0.75) >= 0.995 and candidate(0.2) <= 0.01
    assert StateStore(threshold=0.9).lsh_params != (bands, rows)


@pytest.mark.parametrize(
    "kwargs",
    [{"threshold": 0}, {"threshold": 1.5}, {"num_perm": 4}, {"threshold": "x"}, {"threshold": True}, {"seed": -1}],
)
def test_bad_parameters_are_user_errors(kwargs):
    with pytest.raises(MalloryError):
        StateStore(**kwargs)


def test_bad_tokens_and_signatures_are_user_errors():
    store = StateStore()
    with pytest.raises(MalloryError, match="tokens must be str"):
        store.lookup([b"bytes-token"])
    with pytest.raises(MalloryError, match="set of tokens"):
        store.lookup("n1|FUNC:1234")
    with pytest.raises(MalloryError, match="tokens must be str"):
        store.lookup([["unhashable"]])
    with pytest.raises(MalloryError, match="uint32"):
        store.lookup_signature(np.zeros(64, dtype=np.uint32))


def test_band_index_proposes_exactly_datasketchs_candidates():
    from datasketch import MinHashLSH

    from mallory.learner.lsh import BandIndex

    rng = random.Random(21)
    store = StateStore()
    bases = [random_summary(rng, rng.randrange(20, 150)) for _ in range(300)]
    stored = [store.signature(b) for b in bases]
    queries = [store.signature(with_jaccard(rng, rng.choice(bases), rng.random())) for _ in range(300)]
    bands, rows = store.lsh_params
    ours, theirs = BandIndex(bands, rows), MinHashLSH(num_perm=128, params=(bands, rows))
    for i, signature in enumerate(stored):
        ours.insert(i, signature)
        theirs.insert(i, MinHash(hashvalues=signature, scheme="affine32"))
    proposed = 0
    for signature in queries + stored:
        expected = set(theirs.query(MinHash(hashvalues=signature, scheme="affine32")))
        assert ours.query(signature) == expected
        proposed += len(expected)
    assert proposed > len(stored)  # queries found real candidates, not just empty sets
