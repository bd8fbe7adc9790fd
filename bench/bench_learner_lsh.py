"""State lookup with 100,000 stored states: LSH (StateStore) versus a linear scan.

Synthetic summaries shaped like the timeline's (tokens "n3|FUNC:0a1b2c|RECV:9f3e",
20-200 tokens per window), grouped in families: members of a family share ~60% of the
family's tokens, so stored states have near-but-distinct neighbours (Jaccard ~0.2-0.3)
the way a real campaign's states do, not only unrelated ones.

Both lookups answer the same question for a query signature: the stored state with the
most equal signature positions (ties: lowest id) if it reaches the threshold, else "new".
The baseline scans all stored signatures with one vectorised numpy comparison per query,
so it is a fair one. Queries: near-duplicates of stored states (should match), family
relatives below the threshold and fresh summaries (should be new). Reports lookups/s for
both from signatures (the state-lookup part) and end to end (signature included for LSH),
their ratio, and how often the answers agree; then our band index against datasketch's
MinHashLSH (same bands) on a 20,000-signature subset. Both run in this process, so the ratio is
robust to other load on the machine; absolute numbers are not.

Usage: bench_learner_lsh.py [STATES]   (default 100000; takes about a minute)
"""

from __future__ import annotations

import sys
import time

import numpy as np
from datasketch import MinHash, MinHashLSH

from mallory.learner.lsh import BandIndex
from mallory.learner.states import StateStore

SEED = 20231126
VOCABULARY = 1_000_000  # stays within StateStore's token-hash cache
FAMILY_SIZE = 5
KEEP_FROM_FAMILY = 0.6
QUERIES_NEAR = 600
QUERIES_RELATIVE = 200
QUERIES_FRESH = 200
DATASKETCH_SUBSET = 20_000


def token(i: int) -> str:
    return f"n{i % 5 + 1}|FUNC:{i:06x}|RECV:{(i * 40503) & 0xFFFF:04x}"


class Synth:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.vocabulary = [token(i) for i in range(VOCABULARY)]

    def fresh(self, n: int) -> np.ndarray:
        return np.unique(self.rng.integers(0, VOCABULARY, n))

    def family(self) -> np.ndarray:
        return self.fresh(int(self.rng.integers(20, 201)))

    def member(self, family: np.ndarray) -> np.ndarray:
        kept = self.rng.choice(family, int(len(family) * KEEP_FROM_FAMILY), replace=False)
        return np.union1d(kept, self.fresh(len(family) - len(kept)))

    def like(self, base: np.ndarray, jaccard: float) -> np.ndarray:
        """Same size as base, Jaccard ~ `jaccard` to it."""
        keep = round(2 * len(base) * jaccard / (1 + jaccard))
        return np.union1d(self.rng.choice(base, keep, replace=False), self.fresh(len(base) - keep))

    def summary(self, indices: np.ndarray) -> frozenset[str]:
        vocabulary = self.vocabulary
        return frozenset(vocabulary[i] for i in indices.tolist())


def linear_lookup(signatures: np.ndarray, query: np.ndarray, min_matches: int) -> int:
    # sum with a uint16 accumulator measured ~25% faster here than np.count_nonzero(axis=1)
    matches = (signatures == query).sum(axis=1, dtype=np.uint16)
    best = int(matches.max())
    return int(np.argmax(matches)) if best >= min_matches else -1


def compare_with_datasketch(stored: np.ndarray, queries: list[np.ndarray], params: tuple[int, int]) -> None:
    """Our BandIndex against datasketch's MinHashLSH with the same bands, same signatures."""
    ours = BandIndex(*params)
    theirs = MinHashLSH(num_perm=stored.shape[1], params=params)
    t0 = time.perf_counter()
    for i, signature in enumerate(stored):
        ours.insert(i, signature)
    ours_insert = time.perf_counter() - t0
    minhashes = [MinHash(hashvalues=signature, scheme="affine32") for signature in stored]
    t0 = time.perf_counter()
    for i, minhash in enumerate(minhashes):
        theirs.insert(i, minhash, check_duplication=False)
    theirs_insert = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours_found = [ours.query(q) for q in queries]
    ours_query = time.perf_counter() - t0
    query_minhashes = [MinHash(hashvalues=q, scheme="affine32") for q in queries]
    t0 = time.perf_counter()
    theirs_found = [set(theirs.query(q)) for q in query_minhashes]
    theirs_query = time.perf_counter() - t0
    same = sum(a == b for a, b in zip(ours_found, theirs_found))
    n, m = len(stored), len(queries)
    print(
        f"index only, {n} signatures, {m} queries: BandIndex insert {ours_insert / n * 1e6:.1f} us, "
        f"query {ours_query / m * 1e6:.1f} us; datasketch MinHashLSH insert {theirs_insert / n * 1e6:.1f} us, "
        f"query {theirs_query / m * 1e6:.1f} us (MinHash objects prebuilt); same candidates {same}/{m}"
    )


def main() -> int:
    states = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    started = time.perf_counter()
    synth = Synth(np.random.default_rng(SEED))
    store = StateStore()
    print(f"StateStore num_perm={store.num_perm} threshold={store.threshold} LSH bands x rows={store.lsh_params}")

    stored: list[np.ndarray] = []
    build = 0.0
    while len(store) < states:
        family = synth.family()
        for _ in range(FAMILY_SIZE):
            member = synth.member(family)
            summary = synth.summary(member)
            t0 = time.perf_counter()
            match = store.lookup(summary)
            build += time.perf_counter() - t0
            if match.is_new:
                stored.append(member)
            if len(store) == states:
                break
    tokens = sum(len(s) for s in stored)
    print(
        f"stored {len(store)} states ({tokens / len(stored):.0f} tokens each on average) "
        f"in {build:.1f} s of lookups ({len(store) / build:,.0f} inserting lookups/s incl. signatures)"
    )

    picks = synth.rng.integers(0, len(stored), QUERIES_NEAR + QUERIES_RELATIVE)
    query_sets = [synth.like(stored[p], float(synth.rng.choice([0.75, 0.85, 0.95]))) for p in picks[:QUERIES_NEAR]]
    query_sets += [synth.like(stored[p], 0.5) for p in picks[QUERIES_NEAR:]]
    query_sets += [synth.family() for _ in range(QUERIES_FRESH)]
    summaries = [synth.summary(q) for q in query_sets]
    for summary in summaries:  # warm the token-hash cache so both timings below are steady-state
        store.signature(summary)

    t0 = time.perf_counter()
    signatures = [store.signature(s) for s in summaries]
    signature_time = time.perf_counter() - t0

    t0 = time.perf_counter()
    lsh_answers = [store.peek_signature(sig) for sig in signatures]
    lsh_time = time.perf_counter() - t0

    matrix = np.ascontiguousarray(store.signatures)
    t0 = time.perf_counter()
    linear_answers = [linear_lookup(matrix, sig, store.min_matches) for sig in signatures]
    linear_time = time.perf_counter() - t0

    n = len(signatures)
    lsh_ids = [-1 if a.is_new else a.state_id for a in lsh_answers]
    agree = sum(a == b for a, b in zip(lsh_ids, linear_answers))
    matched = sum(b >= 0 for b in linear_answers)
    lsh_rate, linear_rate = n / lsh_time, n / linear_time
    end_to_end = n / (lsh_time + signature_time)
    print(
        f"queries: {n} ({QUERIES_NEAR} near-duplicates, {QUERIES_RELATIVE} relatives at Jaccard 0.5, "
        f"{QUERIES_FRESH} fresh); the linear scan matches {matched} of them"
    )
    print(f"signatures:          {n / signature_time:12,.0f} /s")
    print(f"LSH lookup:          {lsh_rate:12,.0f} lookups/s (from signatures)")
    print(f"LSH end to end:      {end_to_end:12,.0f} lookups/s (signature + lookup)")
    print(f"linear scan lookup:  {linear_rate:12,.0f} lookups/s (numpy over {len(matrix)} signatures)")
    print(
        f"ratio LSH / linear:  {lsh_rate / linear_rate:12.1f}x   (end to end: {end_to_end / linear_rate:.1f}x; "
        f"target >= 20x)"
    )
    print(f"agreement:           {agree}/{n} = {agree / n:.2%}")
    for a, b, q in zip(lsh_ids, linear_answers, range(n)):
        if a != b:
            print(
                f"  disagreement on query {q}: LSH {a}, linear {b} "
                f"(linear best similarity {np.count_nonzero(matrix[b] == signatures[q]) / 128:.3f})"
                if b >= 0
                else f"  disagreement on query {q}: LSH {a}, linear new"
            )
    compare_with_datasketch(matrix[:DATASKETCH_SUBSET], signatures, store.lsh_params)
    print(f"took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
