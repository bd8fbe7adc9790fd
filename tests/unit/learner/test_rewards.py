import pytest

from mallory.errors import MalloryError
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


def test_registry_lists_both_and_unknown_names_are_user_errors():
    assert {"paper", "novelty"} <= set(REWARDS)
    with pytest.raises(MalloryError, match="unknown reward 'bonus'.*novelty, paper"):
        make_reward("bonus")
    with pytest.raises(MalloryError, match="power"):
        make_reward("novelty", power=0)
    with pytest.raises(MalloryError, match="bad parameters"):
        make_reward("paper", power=2)
