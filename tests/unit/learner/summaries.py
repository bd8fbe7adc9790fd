"""Synthetic window summaries for the learner tests: token sets shaped like the timeline's
("n1|FUNC:1a2b|RECV:03ff"), with controlled overlaps."""

from __future__ import annotations

import random


def token(rng: random.Random) -> str:
    return f"n{rng.randrange(1, 6)}|FUNC:{rng.getrandbits(16):04x}|RECV:{rng.getrandbits(16):04x}"


def random_summary(rng: random.Random, size: int) -> frozenset[str]:
    return frozenset(token(rng) for _ in range(size))


def with_jaccard(rng: random.Random, base: frozenset[str], jaccard: float) -> frozenset[str]:
    """A set whose exact Jaccard similarity to `base` is as close to `jaccard` as sizes
    allow: keep k tokens of base and add m fresh ones, same size, k / (2n - k) = jaccard."""
    n = len(base)
    keep = round(2 * n * jaccard / (1 + jaccard))
    kept = rng.sample(sorted(base), keep)
    fresh: set[str] = set()
    while len(fresh) < n - keep:
        t = token(rng)
        if t not in base:
            fresh.add(t)
    return frozenset(kept) | frozenset(fresh)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def steady_windows(rng: random.Random, count: int, core_size: int = 80) -> list[frozenset[str]]:
    """Fault-free windows: one core behaviour, each window missing a few core tokens and
    showing a few tokens from a small pool of occasional events."""
    core = sorted(random_summary(rng, core_size))
    occasional = sorted(random_summary(rng, 40))
    windows = []
    for _ in range(count):
        dropped = set(rng.sample(core, rng.randrange(0, 7)))
        extra = rng.sample(occasional, rng.randrange(0, 9))
        windows.append(frozenset(t for t in core if t not in dropped) | frozenset(extra))
    return windows
