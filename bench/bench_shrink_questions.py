"""How many replays a shrink asks for: ddmin with and without subset tests, on synthetic
schedules whose bug needs a set of faults in order (the shape of the example SUT's seeded
bugs), against a deterministic fake oracle.

Each question is a replay on a fresh cluster (about 25 s on a 2-core machine), so the
number of questions is the shrink's cost. Prints, per schedule length and number of
essential faults, the mean questions of classic ddmin (subsets, then complements) and of
complements-only ddmin (what `mallory shrink` uses), and their ratio; both results are
checked to be the essential faults.

    .venv/bin/python bench/bench_shrink_questions.py [--trials 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics

from mallory.shrink.ddmin import ddmin


def questions(length: int, essential: int, rng: random.Random, subsets: bool) -> int:
    needed = sorted(rng.sample(range(length), essential))
    asked = 0

    def fails(candidate: list[int]) -> bool:
        nonlocal asked
        asked += 1
        return set(needed) <= set(candidate)

    assert ddmin(list(range(length)), fails, subsets=subsets) == needed
    return asked


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'steps':>5} {'essential':>9} {'classic':>8} {'complements':>11} {'ratio':>6}")
    for length in (6, 12, 24, 48):
        for essential in (1, 2, 3):
            rng_a, rng_b = random.Random(args.seed), random.Random(args.seed)  # the same schedules for both
            classic = statistics.mean(questions(length, essential, rng_a, True) for _ in range(args.trials))
            complements = statistics.mean(questions(length, essential, rng_b, False) for _ in range(args.trials))
            print(f"{length:>5} {essential:>9} {classic:>8.1f} {complements:>11.1f} {complements / classic:>6.2f}")


if __name__ == "__main__":
    main()
