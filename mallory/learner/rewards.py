"""Rewards: how much a visit to a state is worth, selectable by name.

A reward sees the `StateMatch` of the window that just ended (is it new, how often has it
been visited, counting this visit) and returns a float. Both rewards here stay on the
paper's scale [-1, 0], so the softmax temperature chosen for one suits the other.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.states import StateMatch


class Reward(ABC):
    name: ClassVar[str]

    @abstractmethod
    def __call__(self, match: StateMatch) -> float: ...

    def params(self) -> dict[str, Any]:
        return {}

    def to_state(self) -> dict[str, Any]:
        return {"name": self.name, "params": self.params()}


class PaperReward(Reward):
    """The paper's reward: 0 for a state never seen before, -1 for an already-seen one."""

    name = "paper"

    def __call__(self, match: StateMatch) -> float:
        return 0.0 if match.is_new else -1.0


class NoveltyReward(Reward):
    """A count-based novelty bonus: `-1 + visits ** -power`, visits counting this one.

    A new state is worth 0 (as in the paper), a second visit -1 + 2**-0.5 = -0.29, the
    tenth -0.68, tending to -1. Unlike the paper's reward, a rarely visited state still
    pays more than a worn-out one, so the learner keeps a gradient towards the rare
    corners after the first visit (the classic 1/sqrt(n) exploration bonus with power 0.5).
    """

    name = "novelty"

    def __init__(self, power: float = 0.5) -> None:
        if not isinstance(power, (int, float)) or isinstance(power, bool) or power <= 0:
            raise MalloryError(f"novelty reward: power must be a positive number, got {power!r}")
        self.power = float(power)

    def __call__(self, match: StateMatch) -> float:
        return -1.0 + math.pow(max(match.visits, 1), -self.power)

    def params(self) -> dict[str, Any]:
        return {"power": self.power}


REWARDS: dict[str, type[Reward]] = {cls.name: cls for cls in (PaperReward, NoveltyReward)}


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
