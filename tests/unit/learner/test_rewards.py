import pytest

from mallory.errors import MalloryError
from mallory.learner.coverage import PairCoverage, PairsSeen
from mallory.learner.rewards import REWARDS, make_reward
from mallory.learner.states import StateMatch


def match(is_new: bool, visits: int) -> StateMatch:
    return StateMatch(0, is_new, 1.0, visits)


def test_paper_reward():
    reward = make_reward("paper")
    assert reward(match(True, 1)) == 0.0
    assert reward(match(False, 2)) == -1.0
    assert reward(match(False, 1000)) == -1.0


def test_novelty_reward_decays_with_visits_on_the_paper_scale():
    reward = make_reward("novelty")
    values = [reward(match(visits == 1, visits)) for visits in range(1, 200)]
    assert values[0] == 0.0
    assert values[1] == pytest.approx(-1 + 2**-0.5)
    assert all(a > b for a, b in zip(values, values[1:]))
    assert all(-1.0 < v <= 0.0 for v in values)
    steeper = make_reward("novelty", power=1.0)
    assert steeper(match(False, 4)) == -0.75


def test_pairs_reward_pays_for_a_new_pair_only_whatever_the_state():
    reward = make_reward("pairs")
    assert reward(match(False, 9), PairsSeen(pairs=5, new=1, rarest=1)) == 0.0
    assert reward(match(True, 1), PairsSeen(pairs=5, new=0, rarest=3)) == -1.0
    assert reward(match(True, 1)) == -1.0  # a window that showed no pairs


def test_pair_novelty_follows_the_rarest_pair_of_the_window():
    reward = make_reward("pair-novelty")
    coverage = PairCoverage()
    values = [reward(match(False, 2), coverage.add({"a>b", "b>c"})) for _ in range(50)]
    assert values[0] == 0.0 and values[1] == pytest.approx(-1 + 2**-0.5)
    assert all(a > b for a, b in zip(values, values[1:])) and all(-1 < v <= 0 for v in values)
    # one new pair among worn-out ones makes the window new again
    assert reward(match(False, 2), coverage.add({"a>b", "b>c", "c>a"})) == 0.0
    assert reward(match(False, 2), coverage.add(set())) == -1.0
    assert make_reward("pair-novelty", power=1.0)(match(False, 2), PairsSeen(3, 0, 4)) == -0.75


def test_registry_lists_every_reward_and_unknown_names_are_user_errors():
    assert set(REWARDS) == {"none", "paper", "novelty", "pairs", "pair-novelty", "model"}
    assert make_reward("none")(match(True, 1), PairsSeen(1, 1, 1)) == 0.0
    with pytest.raises(MalloryError, match="unknown reward 'bonus'.*model, none, novelty, pair-novelty, pairs, paper"):
        make_reward("bonus")
    with pytest.raises(MalloryError, match="power"):
        make_reward("novelty", power=0)
    with pytest.raises(MalloryError, match="bad parameters"):
        make_reward("paper", power=2)
