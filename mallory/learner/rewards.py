"""Rewards: how much the window that just ended is worth, selectable by name.

A reward sees the window's `StateMatch` (is its state new, how often has it been visited,
counting this visit), what it added to the campaign's event-pair coverage (`PairsSeen`:
new pairs, the count of its rarest pair) and to its model coverage (`ModelSeen`, when the
campaign has a protocol model: learner/model.py), and returns a float. Every reward here stays on
the paper's scale [-1, 0], so the softmax temperature chosen for one suits the others:

    none          always 0: for policies that reward themselves (bonus-max)
    paper         0 for a new state, -1 for a seen one (the paper's)
    novelty       -1 + visits(state) ** -power: rarely visited states still pay
    pairs         0 when the window showed a pair no window showed before, else -1
                  (AFL's "new edge")
    pair-novelty  -1 + count(rarest pair) ** -power: windows showing rarely seen pairs
                  still pay
    model         -1 + count(rarest model state or transition) ** -power: ModelFuzz's
                  feedback, new states of the protocol model pay most
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.coverage import PairsSeen
from mallory.learner.model import NO_MODEL, ModelSeen
from mallory.learner.states import StateMatch

#: what a window that showed no pairs added (rewards that ignore pairs get it too)
NO_PAIRS = PairsSeen(0, 0, 0)


class Reward(ABC):
    name: ClassVar[str]

    @abstractmethod
    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float: ...

    def params(self) -> dict[str, Any]:
        return {}

    def to_state(self) -> dict[str, Any]:
        return {"name": self.name, "params": self.params()}


class NoReward(Reward):
    """Nothing from outside: the policy's own exploration bonus is its reward (bonus-max)."""

    name = "none"

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        return 0.0


class PaperReward(Reward):
    """The paper's reward: 0 for a state never seen before, -1 for an already-seen one."""

    name = "paper"

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        return 0.0 if match.is_new else -1.0


def _power(name: str, power: float) -> float:
    if not isinstance(power, (int, float)) or isinstance(power, bool) or power <= 0:
        raise MalloryError(f"{name} reward: power must be a positive number, got {power!r}")
    return float(power)


class NoveltyReward(Reward):
    """A count-based novelty bonus: `-1 + visits ** -power`, visits counting this one.

    A new state is worth 0 (as in the paper), a second visit -1 + 2**-0.5 = -0.29, the
    tenth -0.68, tending to -1. Unlike the paper's reward, a rarely visited state still
    pays more than a worn-out one, so the learner keeps a gradient towards the rare
    corners after the first visit (the classic 1/sqrt(n) exploration bonus with power 0.5).
    """

    name = "novelty"

    def __init__(self, power: float = 0.5) -> None:
        self.power = _power("novelty", power)

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        return -1.0 + math.pow(max(match.visits, 1), -self.power)

    def params(self) -> dict[str, Any]:
        return {"power": self.power}


class PairsReward(Reward):
    """AFL's criterion: 0 for a window that showed a happens-before pair of code/log events
    never seen before in the campaign, -1 otherwise. Blind to the state abstraction."""

    name = "pairs"

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        return 0.0 if pairs.new else -1.0


class PairNoveltyReward(Reward):
    """A count-based bonus on coverage: `-1 + rarest ** -power`, where `rarest` is how many
    windows (this one included) showed the window's rarest pair. A new pair is worth 0,
    a pair seen a second time -0.29 (power 0.5); a window without pairs -1."""

    name = "pair-novelty"

    def __init__(self, power: float = 0.5) -> None:
        self.power = _power("pair-novelty", power)

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        if pairs.rarest == 0:
            return -1.0
        return -1.0 + math.pow(pairs.rarest, -self.power)

    def params(self) -> dict[str, Any]:
        return {"power": self.power}


class ModelNoveltyReward(Reward):
    """ModelFuzz's feedback as a count-based bonus: `-1 + rarest ** -power`, where `rarest`
    is how many windows (this one included) showed the window's rarest model state or
    transition. A window that reached a new state of the protocol model, or took a new
    transition, is worth 0; without a model (no states) -1."""

    name = "model"

    def __init__(self, power: float = 0.5) -> None:
        self.power = _power("model", power)

    def __call__(self, match: StateMatch, pairs: PairsSeen = NO_PAIRS, model: ModelSeen = NO_MODEL) -> float:
        if model.rarest == 0:
            return -1.0
        return -1.0 + math.pow(model.rarest, -self.power)

    def params(self) -> dict[str, Any]:
        return {"power": self.power}


REWARDS: dict[str, type[Reward]] = {
    cls.name: cls
    for cls in (NoReward, PaperReward, NoveltyReward, PairsReward, PairNoveltyReward, ModelNoveltyReward)
}
#: the rewards that need the campaign to have a protocol model
NEEDS_MODEL = frozenset({ModelNoveltyReward.name})


def make_reward(name: str, **params: Any) -> Reward:
    """The reward called `name` (see `REWARDS`), built with `params`."""
    cls = REWARDS.get(name)
    if cls is None:
        raise MalloryError(f"unknown reward {name!r}; choose one of: {', '.join(sorted(REWARDS))}")
    try:
        return cls(**params)
    except TypeError as exc:
        raise MalloryError(f"reward {name!r}: bad parameters {params!r} ({exc})") from None


def reward_from_state(state: Any, where: str = "reward") -> Reward:
    name = ckpt.field(state, "name", str, where)
    params = ckpt.field(state, "params", dict, where)
    try:
        return make_reward(name, **params)
    except MalloryError as exc:
        raise ckpt.CheckpointError(f"{where}: {exc}") from None
