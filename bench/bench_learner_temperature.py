"""How the softmax temperature changes exploration, in a toy campaign.

Justifies `mallory.learner.policies.DEFAULT_TEMPERATURE`. The toy: 8 fault actions, each
with its own chance of driving the system into a never-seen state (0.02 ... 0.4); otherwise
the system falls back into one of 6 recurring "steady" states. Schedules of 12 steps
(terminal update at the end), the paper's reward (0 new, -1 seen), alpha 0.1, gamma 0.6.
Prints the mean number of distinct states found in STEPS steps over SEEDS seeds, for
random, several temperatures and epsilon-greedy under the optimistic prior, three
temperatures and epsilon-greedy under the shared prior (see `_QPolicy`), and the oracle that
always picks the best action; once in a stationary world and once where the actions'
chances are reversed halfway through. Pure computation: takes about 40 seconds.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from mallory.learner.policies import make_policy
from mallory.learner.rewards import make_reward
from mallory.learner.states import StateMatch

ACTIONS = [f"fault-{i}" for i in range(8)]
NOVELTY = [0.02, 0.03, 0.05, 0.08, 0.12, 0.18, 0.27, 0.4]
STEADY_STATES = 6
SCHEDULE = 12
STEPS = 1500
SEEDS = 100


def campaign(policy_name: str, seed: int, drift: bool, **params: float | str) -> int:
    """Distinct states found; with `drift`, the actions' novelty chances are reversed
    halfway (the best fault becomes the worst), as when a cluster's behaviour changes."""
    policy = make_policy(policy_name, seed=seed, **params)
    reward = make_reward("paper")
    world = random.Random(10_000 + seed)
    visits: dict[int, int] = {}
    next_new = STEADY_STATES
    state = 0
    for step in range(STEPS):
        action = policy.choose(state, ACTIONS)
        novelty = NOVELTY[::-1] if drift and step >= STEPS // 2 else NOVELTY
        if world.random() < novelty[ACTIONS.index(action)]:
            next_state, next_new = next_new, next_new + 1
        else:
            next_state = world.randrange(STEADY_STATES)
        visits[next_state] = visits.get(next_state, 0) + 1
        match = StateMatch(next_state, visits[next_state] == 1, 1.0, visits[next_state])
        terminal = (step + 1) % SCHEDULE == 0
        policy.update(state, action, reward(match), next_state, [] if terminal else ACTIONS)
        state = 0 if terminal else next_state
    return len(visits)


def main() -> int:
    started = time.perf_counter()
    rows: list[tuple[str, str, dict[str, float | str]]] = [("random", "random", {})]
    # the temperature sweep was made with the optimistic prior (the default then): keep it so
    rows += [
        (f"T={t:g}", "qlearning", {"temperature": t, "prior": "optimistic"})
        for t in (100, 1, 0.3, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005)
    ]
    rows.append(("epsilon-greedy(0.1)", "epsilon-greedy", {"epsilon": 0.1, "prior": "optimistic"}))
    rows += [(f"T={t:g} shared prior", "qlearning", {"temperature": t, "prior": "shared"}) for t in (0.1, 0.03, 0.01)]
    rows.append(("eps-greedy(0.1) shared", "epsilon-greedy", {"epsilon": 0.1, "prior": "shared"}))
    print(f"distinct states in {STEPS} steps, mean over {SEEDS} seeds (standard error of the mean)")
    print(f"  {'':22s} {'stationary':>16s} {'drift at half':>16s}")
    for label, name, params in rows:
        cells = []
        for drift in (False, True):
            found = [campaign(name, seed, drift, **params) for seed in range(SEEDS)]
            cells.append(f"{statistics.mean(found):7.1f} ({statistics.stdev(found) / SEEDS**0.5:3.1f})")
        print(f"  {label:22s} {cells[0]:>16s} {cells[1]:>16s}")
    print(f"  {'best action (oracle)':22s} {NOVELTY[-1] * STEPS:7.1f} {'':8s} {NOVELTY[-1] * STEPS:7.1f}  (expected)")
    print(f"took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
