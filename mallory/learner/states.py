"""Window summaries become states: MinHash signatures, nearest stored state through LSH.

A summary is a set of string tokens (the timeline abstraction's output for one window). Its
MinHash signature is datasketch's "affine32" MinHash with the default SHA-1 token hash:
`signature(summary)` equals `datasketch.MinHash(num_perm, seed).update_batch(tokens)`
bit for bit (a test holds us to it), only faster, because the SHA-1 + MurmurHash3-finalizer
value of each token is cached (the same tokens recur window after window).

Two signatures belong to the same state when their estimated Jaccard similarity (the
fraction of equal signature positions, `matches / num_perm`) is at least `threshold`. A
new signature joins the NEAREST stored state: candidates come from a banded LSH index
(`mallory.learner.lsh`: datasketch's MinHashLSH scheme with leaner bookkeeping), are
verified by estimated Jaccard against the stored signatures, and the one with the most
equal positions wins (ties go to the lowest state id, so the answer does not
depend on set iteration order). If no candidate reaches the threshold, the signature
becomes a new state with the next id and is itself the state's representative: a state is
remembered by the signature of the first window that reached it.

LSH bands are tuned (by datasketch's optimiser) for recall rather than its default
balance: a missed candidate silently splits one state into two (inflating "new state"
rewards), while a false candidate only costs one row of a vectorised comparison. With
the defaults (threshold 0.7, 128 permutations) the weights (0.02, 0.98) give 23 bands of
5 rows: a stored state at estimated Jaccard 0.7 is a candidate with probability 0.986, at
0.75 with 0.998, at 0.8 with 0.9999, while one at 0.5 is a candidate with probability
0.52, at 0.3 with 0.054 and at 0.2 with 0.007. (datasketch's default (0.5, 0.5) would give
14 x 9 and miss a state at 0.75 one time in three; (0.1, 0.9) gives 20 x 6 and missed 5
of 580 matching queries in bench/bench_learner_lsh.py, where 23 x 5 missed none.)

An empty summary (an idle window) has the all-ones signature, like an empty datasketch
MinHash; every empty summary is therefore the same state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from datasketch import MinHash
from datasketch.hashfunc import sha1_hash32

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.lsh import BandIndex, band_params

SCHEME = "affine32"
_EMPTY = np.uint32(0xFFFFFFFF)
#: The token-hash cache is dropped wholesale when it grows past this many tokens; it only
#: speeds things up, so dropping it never changes an answer.
_TOKEN_CACHE_LIMIT = 1 << 20
DEFAULT_LSH_WEIGHTS = (0.02, 0.98)


@dataclass(frozen=True)
class StateMatch:
    """The answer to "which state is this summary?".

    state_id: the matched state, or the id the summary gets (or would get, for `peek`) as
        a new state.
    is_new: no stored state reached the threshold.
    similarity: estimated Jaccard similarity to the matched state; for a new state, to the
        most similar LSH candidate (0.0 when LSH proposed none).
    visits: for `lookup`, the state's visits including this one (1 for a new state); for
        `peek`, the visits recorded so far (0 for a new state).
    """

    state_id: int
    is_new: bool
    similarity: float
    visits: int


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer, the pre-mix datasketch's affine32 scheme applies."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


class StateStore:
    """Stored states (one representative signature each), their visit counts, and an LSH
    index over them."""

    def __init__(
        self,
        num_perm: int = 128,
        threshold: float = 0.7,
        seed: int = 1,
        *,
        lsh_weights: tuple[float, float] = DEFAULT_LSH_WEIGHTS,
        _lsh_params: tuple[int, int] | None = None,
        _permutations: np.ndarray | None = None,
    ) -> None:
        if isinstance(num_perm, bool) or not isinstance(num_perm, int) or num_perm < 16:
            raise MalloryError(f"num_perm must be an integer >= 16, got {num_perm!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
            raise MalloryError(f"state similarity threshold must be in (0, 1], got {threshold!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise MalloryError(f"MinHash seed must be a non-negative integer, got {seed!r}")
        self.num_perm = num_perm
        self.threshold = float(threshold)
        self.seed = seed
        #: a signature matches a state when at least this many positions are equal
        self.min_matches = math.ceil(self.threshold * num_perm - 1e-9)
        if _permutations is None:
            _permutations = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME).permutations
        self._permutations = np.ascontiguousarray(_permutations, dtype=np.uint32)
        self._perm_a = self._permutations[0][np.newaxis, :]
        self._perm_b = self._permutations[1][np.newaxis, :]
        if _lsh_params is None:
            _lsh_params = band_params(self.threshold, num_perm, lsh_weights)
        bands, rows = _lsh_params
        if bands < 1 or rows < 1 or bands * rows > num_perm:
            raise MalloryError(f"LSH params {bands} bands x {rows} rows do not fit num_perm {num_perm}")
        self._lsh = BandIndex(bands, rows)
        self._signatures = np.empty((64, num_perm), dtype=np.uint32)
        self._visits: list[int] = []
        self._token_hashes: dict[str, int] = {}

    # -- signatures ---------------------------------------------------------------------

    def signature(self, summary: Iterable[str]) -> np.ndarray:
        """The MinHash signature of a summary: `num_perm` uint32 values."""
        if isinstance(summary, (str, bytes)):
            raise MalloryError(f"a summary is a set of tokens, not one {type(summary).__name__}: {summary[:60]!r}")
        tokens = summary if isinstance(summary, (frozenset, set, list, tuple)) else list(summary)
        cache = self._token_hashes
        try:
            hashes = [cache.get(token) for token in tokens]
        except TypeError:
            raise MalloryError(f"summary tokens must be str, got {summary!r:.200}") from None
        if not hashes:
            return np.full(self.num_perm, _EMPTY, dtype=np.uint32)
        if None in hashes:
            self._hash_tokens(tokens, hashes)
        mixed = np.array(hashes, dtype=np.uint32)[:, np.newaxis]
        return (mixed * self._perm_a + self._perm_b).min(axis=0)

    def _hash_tokens(self, tokens: Iterable[str], hashes: list[int | None]) -> None:
        """Fill the `None` entries of `hashes` (parallel to `tokens`) and cache them."""
        missing = [(i, token) for i, (token, value) in enumerate(zip(tokens, hashes)) if value is None]
        for _, token in missing:
            if not isinstance(token, str):
                raise MalloryError(f"summary tokens must be str, got {type(token).__name__} {token!r}")
        raw = np.array([sha1_hash32(token.encode("utf-8")) for _, token in missing], dtype=np.uint32)
        if len(self._token_hashes) + len(missing) > _TOKEN_CACHE_LIMIT:
            self._token_hashes.clear()
        for (i, token), value in zip(missing, _fmix32(raw).tolist()):
            hashes[i] = value
            self._token_hashes[token] = value

    # -- lookups ------------------------------------------------------------------------

    def lookup(self, summary: Iterable[str]) -> StateMatch:
        """The state of `summary`, recording the visit (a new state gets the next id)."""
        return self.lookup_signature(self.signature(summary))

    def peek(self, summary: Iterable[str]) -> StateMatch:
        """What `lookup` would answer, without recording anything."""
        return self.peek_signature(self.signature(summary))

    def lookup_signature(self, signature: np.ndarray) -> StateMatch:
        """`lookup` for a signature computed by `signature` (of this store's num_perm/seed)."""
        signature = self._checked(signature)
        state_id, matches = self._nearest(signature)
        if state_id < 0:
            state_id = self._add(signature)
            self._visits.append(1)
            return StateMatch(state_id, True, matches / self.num_perm, 1)
        self._visits[state_id] += 1
        return StateMatch(state_id, False, matches / self.num_perm, self._visits[state_id])

    def peek_signature(self, signature: np.ndarray) -> StateMatch:
        """`peek` for a signature computed by `signature`."""
        signature = self._checked(signature)
        state_id, matches = self._nearest(signature)
        if state_id < 0:
            return StateMatch(len(self._visits), True, matches / self.num_perm, 0)
        return StateMatch(state_id, False, matches / self.num_perm, self._visits[state_id])

    def _checked(self, signature: np.ndarray) -> np.ndarray:
        signature = np.asarray(signature)
        if signature.shape != (self.num_perm,) or signature.dtype != np.uint32:
            raise MalloryError(
                f"a signature must be {self.num_perm} uint32 values, got shape {signature.shape} {signature.dtype}"
            )
        return signature

    def _nearest(self, signature: np.ndarray) -> tuple[int, int]:
        """(state id, equal positions) of the nearest LSH candidate reaching the threshold,
        or (-1, equal positions of the best candidate below it)."""
        candidates = self._lsh.query(signature)
        if not candidates:
            return -1, 0
        ids = np.fromiter(candidates, dtype=np.int64, count=len(candidates))
        matches = np.count_nonzero(self._signatures[ids] == signature, axis=1)
        best = int(matches.max())
        if best < self.min_matches:
            return -1, best
        return int(ids[matches == best].min()), best

    def _add(self, signature: np.ndarray) -> int:
        state_id = len(self._visits)
        if state_id == len(self._signatures):
            grown = np.empty((2 * state_id, self.num_perm), dtype=np.uint32)
            grown[:state_id] = self._signatures
            self._signatures = grown
        self._signatures[state_id] = signature
        self._lsh.insert(state_id, signature)
        return state_id

    # -- inspection ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._visits)

    def visits(self, state_id: int) -> int:
        return self._visits[state_id]

    @property
    def visit_counts(self) -> tuple[int, ...]:
        return tuple(self._visits)

    @property
    def signatures(self) -> np.ndarray:
        """The representative signatures, one row per state id (a read-only view)."""
        view = self._signatures[: len(self._visits)]
        view.flags.writeable = False
        return view

    @property
    def lsh_params(self) -> tuple[int, int]:
        """(bands, rows per band) of the LSH index."""
        return self._lsh.bands, self._lsh.rows

    # -- checkpoints --------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        bands, rows = self.lsh_params
        return {
            "num_perm": self.num_perm,
            "threshold": self.threshold,
            "seed": self.seed,
            "lsh_bands": bands,
            "lsh_rows": rows,
            "permutations": ckpt.encode_array(self._permutations),
            "signatures": ckpt.encode_array(self.signatures),
            "visits": list(self._visits),
        }

    @classmethod
    def from_state(cls, state: Any, where: str = "store") -> StateStore:
        num_perm = ckpt.field(state, "num_perm", int, where)
        threshold = ckpt.field(state, "threshold", (int, float), where)
        seed = ckpt.field(state, "seed", int, where)
        params = (ckpt.field(state, "lsh_bands", int, where), ckpt.field(state, "lsh_rows", int, where))
        if params[0] < 2 or params[1] < 1 or params[0] * params[1] > num_perm:
            raise ckpt.CheckpointError(f"{where}: LSH params {params} do not fit num_perm {num_perm}")
        permutations = ckpt.decode_array(
            ckpt.field(state, "permutations", dict, where), f"{where}.permutations", "uint32", 2
        )
        if permutations.shape != (2, num_perm) or not np.all(permutations[0] & 1):
            raise ckpt.CheckpointError(f"{where}.permutations are not {num_perm} affine32 permutations")
        signatures = ckpt.decode_array(ckpt.field(state, "signatures", dict, where), f"{where}.signatures", "uint32", 2)
        visits = ckpt.field(state, "visits", list, where)
        if signatures.shape != (len(visits), num_perm):
            raise ckpt.CheckpointError(
                f"{where}: {signatures.shape} signatures for {len(visits)} states of {num_perm} permutations"
            )
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in visits):
            raise ckpt.CheckpointError(f"{where}.visits must be positive integers")
        try:
            store = cls(num_perm, threshold, seed, _lsh_params=params, _permutations=permutations)
        except MalloryError as exc:
            raise ckpt.CheckpointError(f"{where}: {exc}") from None
        for signature, count in zip(signatures, visits):
            store._add(signature)
            store._visits.append(count)
        return store
