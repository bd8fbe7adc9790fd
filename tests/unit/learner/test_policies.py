import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.learner.policies import (
    DEFAULT_TEMPERATURE,
    POLICIES,
    SAMPLER_FAULTS,
    make_policy,
    policy_from_state,
)

ACTIONS = ["partition:majority", "kill:one", "pause:all", "clock:bump"]
#: chi-square critical values at p = 0.001 by degrees of freedom
CHI2_CRIT_001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def chi_square(counts: Counter, actions: list, probabilities: list[float], n: int) -> float:
    return sum((counts[a] - n * p) ** 2 / (n * p) for a, p in zip(actions, probabilities))


transitions = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(ACTIONS),
        st.sampled_from([-1.0, 0.0, -0.5, -0.29]),
        st.integers(0, 4),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(history=transitions, name=st.sampled_from(["qlearning", "epsilon-greedy"]))
def test_q_update_equals_the_formula(history, name):
    policy = make_policy(name, seed=1, prior="optimistic")
    q: dict[tuple[int, str], float] = {}
    for state, action, reward, next_state, terminal in history:
        next_actions = [] if terminal else ACTIONS
        future = 0.0 if terminal else max(q.get((next_state, a), 0.0) for a in ACTIONS)
        old = q.get((state, action), 0.0)
        q[(state, action)] = old + 0.1 * (reward + 0.6 * future - old)
        policy.update(state, action, reward, next_state, next_actions)
    for (state, action), value in q.items():
        assert policy.q_value(state, action) == value  # exactly, not approximately
    assert policy.q_value(99, "never") == 0.0


@settings(max_examples=80, deadline=None)
@given(history=transitions)
def test_bonus_max_update_equals_the_reference_model(history):
    """BonusMaxRL by its definition: visits of (s, a), Q starting at 1, a max backup of the
    bonus 1/N plus the reward against the discounted future (0 at a schedule's end)."""
    policy = make_policy("bonus-max", seed=1)
    q: dict[tuple[int, str], float] = {}
    n: dict[tuple[int, str], int] = {}
    for state, action, reward, next_state, terminal in history:
        n[(state, action)] = n.get((state, action), 0) + 1
        future = 0.0 if terminal else max(q.get((next_state, a), 1.0) for a in ACTIONS)
        old = q.get((state, action), 1.0)
        q[(state, action)] = 0.9 * old + 0.1 * max(1 / n[(state, action)] + reward, 0.95 * future)
        policy.update(state, action, reward, next_state, [] if terminal else ACTIONS)
    for (state, action), value in q.items():
        assert policy.q_value(state, action) == pytest.approx(value, abs=1e-12)
        assert policy.visits[state][action] == n[(state, action)]
    assert policy.q_value(99, "never") == 1.0
    restored = policy_from_state(policy.to_state())
    assert restored.q == policy.q and restored.visits == policy.visits


def test_bonus_max_prefers_the_actions_visited_least():
    """A first visit's bonus (1) keeps Q at its start value; from the second on, the decayed
    bonus lowers it below every untried or once-tried action's."""
    policy = make_policy("bonus-max", seed=3, epsilon=0.0)
    policy.update(0, "kill:one", 0.0, 1, [])
    assert policy.q_value(0, "kill:one") == 1.0
    policy.update(0, "kill:one", 0.0, 1, [])
    assert policy.q_value(0, "kill:one") < 1.0
    assert "kill:one" not in {policy.choose(0, ACTIONS) for _ in range(200)}
    assert len({policy.choose(0, ACTIONS) for _ in range(200)}) == len(ACTIONS) - 1  # ties at random


@settings(max_examples=80, deadline=None)
@given(history=transitions, name=st.sampled_from(["qlearning", "epsilon-greedy"]))
def test_shared_prior_starts_an_untried_pair_at_the_actions_mean_elsewhere(history, name):
    """The same Q-learning, except that a pair not updated yet is worth the mean Q of its
    action over the states where that action was updated (0 where it never was)."""
    policy = make_policy(name, seed=1, prior="shared")
    q: dict[tuple[int, str], float] = {}

    def value(state: int, action: str) -> float:
        if (state, action) in q:
            return q[(state, action)]
        tried = [v for (_, a), v in q.items() if a == action]
        return math.fsum(tried) / len(tried) if tried else 0.0

    for state, action, reward, next_state, terminal in history:
        future = 0.0 if terminal else max(value(next_state, a) for a in ACTIONS)
        old = value(state, action)
        q[(state, action)] = old + 0.1 * (reward + 0.6 * future - old)
        policy.update(state, action, reward, next_state, [] if terminal else ACTIONS)
        for s in range(6):
            for a in ACTIONS:
                assert policy.q_value(s, a) == value(s, a), (s, a)


def test_shared_prior_leans_a_new_state_towards_what_worked_elsewhere():
    shared = make_policy("qlearning", seed=3, prior="shared")
    optimistic = make_policy("qlearning", seed=3, prior="optimistic")
    for policy in (shared, optimistic):
        for state in range(5):  # in every state met so far, kill:one found new states, the rest did not
            for action in ACTIONS:
                policy.update(state, action, 0.0 if action == "kill:one" else -1.0, state + 1, ACTIONS)
    assert shared.probabilities(99, ACTIONS)[ACTIONS.index("kill:one")] > 0.99
    assert optimistic.probabilities(99, ACTIONS) == [0.25] * 4  # all untried: uniform


def test_shared_prior_survives_a_checkpoint_in_any_row_order():
    """A restored policy fills its rows in another order than the updates did; the shared
    means (exact sums) and so the choices come out the same."""
    original = make_policy("qlearning", seed=5, prior="shared")
    rng = random.Random(2)
    for _ in range(400):
        original.update(rng.randrange(50), rng.choice(ACTIONS), rng.choice([0.0, -1.0]), rng.randrange(50), ACTIONS)
    saved = original.to_state()
    means = [original.untried_value(a) for a in ACTIONS]
    choices = [original.choose(777, ACTIONS) for _ in range(200)]
    for rows in (saved["q"], list(reversed(saved["q"]))):
        restored = policy_from_state({**saved, "q": rows})
        assert restored.prior == "shared"
        assert [restored.untried_value(a) for a in ACTIONS] == means  # exactly
        assert [restored.choose(777, ACTIONS) for _ in range(200)] == choices


def test_a_checkpoint_from_before_priors_keeps_the_optimistic_prior():
    """A campaign saved before the prior was a parameter resumes as it ran (the default is
    now shared)."""
    assert make_policy("qlearning").prior == make_policy("epsilon-greedy").prior == "shared"
    for name in ("qlearning", "epsilon-greedy"):
        saved = make_policy(name, prior="optimistic").to_state()
        del saved["params"]["prior"]
        assert policy_from_state(saved).prior == "optimistic"
    assert "prior" not in policy_from_state(make_policy("random").to_state()).params()


def test_q_update_by_hand():
    policy = make_policy("qlearning", alpha=0.5, gamma=0.9, prior="optimistic")
    policy.update(1, "a", -1.0, 2, ["a", "b"])
    assert policy.q_value(1, "a") == -0.5
    policy.update(2, "b", 0.0, 3, ["a"])  # Q(3, a) = 0
    policy.update(1, "b", -1.0, 2, ["a", "b"])  # max Q(2, .) = Q(2, a) = 0
    assert policy.q_value(1, "b") == -0.5
    policy.update(2, "a", -1.0, 1, [])  # terminal: no bootstrap
    assert policy.q_value(2, "a") == -0.5
    policy.update(1, "a", 0.0, 2, ["a", "b"])  # max Q(2, .) = Q(2, b) = 0
    assert policy.q_value(1, "a") == -0.25


def primed_qlearning(temperature: float, seed: int = 7):
    policy = make_policy("qlearning", seed=seed, temperature=temperature)
    policy.q[0] = {"partition:majority": 0.0, "kill:one": -0.05, "pause:all": -0.1, "clock:bump": -0.3}
    return policy


def test_softmax_probabilities_follow_the_definition():
    policy = primed_qlearning(0.05)
    weights = [math.exp(policy.q[0][a] / 0.05) for a in ACTIONS]
    expected = [w / sum(weights) for w in weights]
    assert policy.probabilities(0, ACTIONS) == pytest.approx(expected, rel=1e-12)
    assert sum(policy.probabilities(5, ACTIONS)) == pytest.approx(1.0)
    # an unseen state: each action at its mean over the states where it was tried (only 0)
    assert policy.probabilities(5, ACTIONS) == policy.probabilities(0, ACTIONS)
    assert make_policy("qlearning", prior="optimistic").probabilities(5, ACTIONS) == [0.25] * 4


@pytest.mark.parametrize("temperature", [0.05, 0.2, 1.0])
def test_softmax_sampling_matches_the_distribution(temperature):
    policy = primed_qlearning(temperature)
    probabilities = policy.probabilities(0, ACTIONS)
    n = 40_000
    counts = Counter(policy.choose(0, ACTIONS) for _ in range(n))
    assert set(counts) <= set(ACTIONS)
    assert chi_square(counts, ACTIONS, probabilities, n) < CHI2_CRIT_001[3]


def test_default_temperature_discriminates_at_reward_scale():
    # one visit to a seen state (reward -1) from Q = 0 leaves Q = -0.1
    policy = make_policy("qlearning")
    assert policy.temperature == DEFAULT_TEMPERATURE
    policy.update(0, "kill:one", -1.0, 1, [])
    p = dict(zip(ACTIONS, policy.probabilities(0, ACTIONS)))
    assert p["partition:majority"] / p["kill:one"] >= 2.0
    # the paper code's temperature 100 cannot tell them apart: the point
    hot = make_policy("qlearning", temperature=100)
    hot.update(0, "kill:one", -1.0, 1, [])
    p_hot = dict(zip(ACTIONS, hot.probabilities(0, ACTIONS)))
    assert p_hot["partition:majority"] / p_hot["kill:one"] < 1.01


def test_epsilon_greedy_zero_is_greedy_with_random_ties():
    policy = make_policy("epsilon-greedy", seed=3, epsilon=0.0)
    policy.q[0] = {"partition:majority": -0.5, "kill:one": -0.2, "pause:all": -0.2, "clock:bump": -0.9}
    counts = Counter(policy.choose(0, ACTIONS) for _ in range(2000))
    assert set(counts) == {"kill:one", "pause:all"}
    assert abs(counts["kill:one"] - 1000) < 150
    policy.q[0]["pause:all"] = -0.3
    assert {policy.choose(0, ACTIONS) for _ in range(200)} == {"kill:one"}


def test_epsilon_greedy_explores_with_probability_epsilon():
    policy = make_policy("epsilon-greedy", seed=4, epsilon=0.2)
    policy.q[0] = {"partition:majority": 0.0, "kill:one": -1.0, "pause:all": -1.0, "clock:bump": -1.0}
    n = 40_000
    counts = Counter(policy.choose(0, ACTIONS) for _ in range(n))
    # greedy 0.8 + uniform 0.2 over 4 actions
    expected = [0.8 + 0.05, 0.05, 0.05, 0.05]
    assert chi_square(counts, ACTIONS, expected, n) < CHI2_CRIT_001[3]


def test_epsilon_one_and_random_are_uniform_and_ignore_learning():
    for name, params in [("epsilon-greedy", {"epsilon": 1.0}), ("random", {})]:
        policy = make_policy(name, seed=5, **params)
        for _ in range(50):
            policy.update(0, "kill:one", 0.0, 0, ACTIONS)
            policy.update(0, "clock:bump", -1.0, 0, ACTIONS)
        n = 40_000
        counts = Counter(policy.choose(0, ACTIONS) for _ in range(n))
        assert chi_square(counts, ACTIONS, [0.25] * 4, n) < CHI2_CRIT_001[3], name


@pytest.mark.parametrize("name", sorted(set(POLICIES) - set(SAMPLER_FAULTS)))
def test_choices_are_deterministic_given_the_seed_and_use_no_global_rng(name):
    def run(seed: int) -> list:
        policy = make_policy(name, seed=seed)
        choices = []
        for step in range(300):
            action = policy.choose(step % 3, ACTIONS)
            policy.update(step % 3, action, -1.0 if step % 2 else 0.0, (step + 1) % 3, ACTIONS)
            choices.append(action)
        return choices

    random.seed(1)
    global_state = random.getstate()
    first = run(11)
    assert random.getstate() == global_state
    random.seed(999)
    assert run(11) == first
    assert run(12) != first


def test_a_set_of_actions_is_ordered_canonically():
    a = make_policy("random", seed=2)
    b = make_policy("random", seed=2)
    forwards = [a.choose(0, frozenset(ACTIONS)) for _ in range(50)]
    backwards = [b.choose(0, sorted(ACTIONS, key=repr)) for _ in range(50)]
    assert forwards == backwards


def test_bad_names_and_parameters_are_user_errors():
    with pytest.raises(MalloryError, match="unknown policy 'ucb'.*bonus-max, epsilon-greedy, modelfuzz, poisson-crash, "
                                           "qlearning, random, random-drop, rounds"):
        make_policy("ucb")
    for name, params in [
        ("qlearning", {"temperature": 0}),
        ("qlearning", {"alpha": 1.5}),
        ("qlearning", {"gamma": "0.6"}),
        ("epsilon-greedy", {"epsilon": -0.1}),
        ("random", {"temperature": 1}),
        ("qlearning", {"prior": "pessimistic"}),
        ("random", {"prior": "shared"}),
        ("bonus-max", {"epsilon": 2}),
        ("bonus-max", {"temperature": 1}),
    ]:
        with pytest.raises(MalloryError):
            make_policy(name, **params)
    with pytest.raises(MalloryError, match="seed"):
        make_policy("random", seed="x")
    with pytest.raises(MalloryError, match="at least one action"):
        make_policy("qlearning").choose(0, [])


# -- sampler policies: one fault every step, whatever the state ----------------------------------


@pytest.mark.parametrize("name, fault", [("rounds", "rounds:lossy-sync"), ("random-drop", "rounds:random-drop"),
                                         ("poisson-crash", "crash:poisson")])
def test_a_sampler_policy_takes_its_fault_every_step_and_survives_a_checkpoint(name, fault):
    assert SAMPLER_FAULTS[name] == fault
    offered = [*ACTIONS, "rounds:lossy-sync", "rounds:random-drop", "crash:poisson", "heal", "noop"]
    policy = make_policy(name, seed=3)
    choices = []
    for step in range(50):
        choices.append(policy.choose(step % 4, offered))
        policy.update(step % 4, choices[-1], -1.0, (step + 1) % 4, offered)
    assert set(choices) == {fault}
    restored = policy_from_state(policy.to_state())
    assert type(restored) is type(policy) and restored.choose(0, offered) == fault


def test_a_sampler_policy_whose_fault_is_not_offered_says_which_it_needs():
    with pytest.raises(MalloryError, match=r"policy rounds takes rounds:lossy-sync, which is not among the faults "
                                           r"offered \(partition:majority, kill:one, pause:all, clock:bump, noop\)"):
        make_policy("rounds").choose(0, [*ACTIONS, "noop"])
    with pytest.raises(MalloryError, match="bad parameters"):
        make_policy("rounds", temperature=0.1)
