"""States (MinHash + LSH), rewards and policies. Pure Python: no sockets, no subprocess."""

from mallory.learner.calibration import calibrate_threshold, coincidence_fraction
from mallory.learner.learner import Learner
from mallory.learner.policies import POLICIES, Policy, make_policy
from mallory.learner.rewards import REWARDS, Reward, make_reward
from mallory.learner.states import StateMatch, StateStore

__all__ = [
    "POLICIES",
    "REWARDS",
    "Learner",
    "Policy",
    "Reward",
    "StateMatch",
    "StateStore",
    "calibrate_threshold",
    "coincidence_fraction",
    "make_policy",
    "make_reward",
]
