"""Calibrating the state similarity threshold epsilon from fault-free "steady" windows.

The paper's convention: pick epsilon so that 90% of the windows of a fault-free run
coincide. Here, precisely:

    Replay the steady summaries, in the given order, through a fresh
    `StateStore(num_perm, epsilon, seed)` with `lookup`. Window i COINCIDES when its lookup
    answers an already-seen state (`is_new` is False). The first window can never
    coincide, so the coincidence fraction is (coinciding windows) / (windows - 1).

`calibrate_threshold` returns the LARGEST epsilon (the most discriminating one) whose
replay reaches the requested fraction. Estimated Jaccard similarities are multiples of
1/num_perm, so only the thresholds k/num_perm are distinct and those are the candidates,
tried from k = num_perm downwards; the first whose store replay passes is the answer.
Because a replay through the LSH-backed store costs about 0.1 ms per window, candidates
are screened first with an exact replay (nearest by estimated Jaccard over all stored
states, from a pairwise matrix of equal signature positions: O(n^2 * num_perm) once for
n windows, fine for the hundreds to few thousands of windows a steady run gives): a
candidate whose exact fraction is below `coincide - SCREEN_MARGIN` is skipped without a
store replay. LSH misses move the store's fraction away from the exact one in both
directions (a missed candidate adds a representative that may absorb later windows); on
8 synthetic steady runs of 300 windows the difference never exceeded 0.027 at any k,
so the 0.05 margin skips only thresholds that cannot pass.

The returned epsilon therefore makes at least `coincide` of the sample coincide in exactly
the store the campaign will use, provided it uses the same num_perm, seed and LSH weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from mallory.errors import MalloryError
from mallory.learner.states import DEFAULT_LSH_WEIGHTS, StateStore

#: candidates whose exact-replay fraction is this far below the target skip the store replay
SCREEN_MARGIN = 0.05
#: the pairwise matrix of equal positions takes 2 * n^2 bytes: 200 MB at this many windows
#: (7 hours of 2.5 s windows)
MAX_WINDOWS = 10_000


def coincidence_fraction(
    steady_summaries: Iterable[Iterable[str]],
    threshold: float,
    *,
    num_perm: int = 128,
    seed: int = 1,
    lsh_weights: tuple[float, float] = DEFAULT_LSH_WEIGHTS,
) -> float:
    """The fraction of windows after the first that a fresh store maps to a seen state."""
    signatures = _signatures(steady_summaries, num_perm, seed)
    return _store_fraction(signatures, threshold, num_perm, seed, lsh_weights)


def calibrate_threshold(
    steady_summaries: Iterable[Iterable[str]],
    coincide: float = 0.9,
    *,
    num_perm: int = 128,
    seed: int = 1,
    lsh_weights: tuple[float, float] = DEFAULT_LSH_WEIGHTS,
    max_windows: int = MAX_WINDOWS,
) -> float:
    """The largest threshold k/num_perm under which at least `coincide` of the steady
    windows coincide (see the module docstring for the exact meaning)."""
    if isinstance(coincide, bool) or not isinstance(coincide, (int, float)) or not 0.0 < coincide <= 1.0:
        raise MalloryError(f"calibration: coincide must be in (0, 1], got {coincide!r}")
    signatures = _signatures(steady_summaries, num_perm, seed)
    if len(signatures) > max_windows:
        raise MalloryError(
            f"calibration: {len(signatures)} steady windows are more than the {max_windows} it handles "
            f"(its pairwise matrix grows with the square); give it a contiguous stretch of the steady run"
        )
    equal = _equal_positions(signatures)
    floor = coincide - SCREEN_MARGIN
    for k in range(num_perm, 0, -1):
        if _exact_fraction(equal, k, floor) < floor:
            continue
        threshold = k / num_perm
        if _store_fraction(signatures, threshold, num_perm, seed, lsh_weights) >= coincide:
            return threshold
    loosest = _exact_fraction(equal, 1, 0.0)
    raise MalloryError(
        f"calibration: the {len(signatures)} steady windows are too dissimilar: no threshold makes "
        f"{coincide:.0%} of them coincide (even at 1/{num_perm}, only {loosest:.1%}); "
        "are they really fault-free and steady?"
    )


def _signatures(summaries: Iterable[Iterable[str]], num_perm: int, seed: int) -> np.ndarray:
    store = StateStore(num_perm=num_perm, seed=seed)
    rows = [store.signature(summary) for summary in summaries]
    if len(rows) < 2:
        raise MalloryError(f"calibration needs at least 2 steady windows, got {len(rows)}")
    return np.stack(rows)


def _equal_positions(signatures: np.ndarray) -> np.ndarray:
    """equal[i, j] = number of positions where signatures i and j agree (int16)."""
    n = len(signatures)
    equal = np.empty((n, n), dtype=np.int16)
    block = max(1, (1 << 22) // (n * signatures.shape[1]))
    for start in range(0, n, block):
        rows = signatures[start : start + block, np.newaxis, :]
        equal[start : start + block] = np.count_nonzero(rows == signatures[np.newaxis, :, :], axis=2)
    return equal


def _exact_fraction(equal: np.ndarray, min_matches: int, floor: float) -> float:
    """Replay with exact nearest-state search: representatives are the windows that were
    new when they arrived, as in `StateStore`. Stops early, returning a value below
    `floor`, once the fraction can no longer reach `floor`."""
    n = len(equal)
    allowed_misses = int((1.0 - floor) * (n - 1) + 1e-9)
    representatives = np.empty(n, dtype=np.intp)
    representatives[0] = 0
    count = 1
    for i in range(1, n):
        if equal[i, representatives[:count]].max() < min_matches:
            representatives[count] = i
            count += 1
            if count - 1 > allowed_misses:
                return (n - count) / (n - 1)
    return (n - count) / (n - 1)


def _store_fraction(
    signatures: Sequence[np.ndarray] | np.ndarray,
    threshold: float,
    num_perm: int,
    seed: int,
    lsh_weights: tuple[float, float],
) -> float:
    store = StateStore(num_perm=num_perm, threshold=threshold, seed=seed, lsh_weights=lsh_weights)
    coinciding = sum(not store.lookup_signature(signature).is_new for signature in signatures)
    return coinciding / (len(signatures) - 1)
