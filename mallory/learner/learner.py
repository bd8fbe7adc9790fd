"""The learner the campaign loop talks to: states + coverage + reward + policy, and checkpoints.

The loop alternates, per step of a schedule:

    match, reward = learner.observe(summary, pairs, waypoint)   # the window that just ended
    fault = learner.next_action(available_faults)               # what to do during the next one

and calls `end_schedule()` when a schedule ends (before the cluster is reset); at a
schedule's start it may ask for a whole `plan` first (a policy that plans schedules, as
modelfuzz does, returns one; the others None). The plan is this trajectory's, played by
whoever asked for it (the loop enacts its steps): the actions `take` says were taken play it
while they are its steps in order, and a `next_action` (a decision asked for: its player
never got the plan) ends it there; at `end_schedule` the policy hears the part played.
`summary` is
the window's abstraction (it becomes a state), `pairs` its happens-before pairs of code and
log events (they accumulate into `coverage`, the campaign's event-pair coverage),
`waypoint` the highest waypoint predicate the window satisfied (0: none) and `model`, when
the campaign has a protocol model, what the window did in it (it accumulates into
`model_coverage`; learner/model.py). The transition
(state, action) -> next state is learnt from the first window observed after the action;
its update is applied when the next action is chosen, because Q-learning's target needs
the actions available in the next state, or at `end_schedule`, where the next state is
terminal (no bootstrap). Further windows observed before the next action only move the
current state.

Context: what the policy learns action values for. "state" (the paper's) is the window's
state; "faults" is the multiset of fault families in force when the window ended (what the
fuzzer has done so far in the schedule; `faults` of `observe`). Most window states are met
once, so a table over them learns little per entry; the fault configurations recur, so
"which fault, on top of these, led to new behaviour" is learnt from every schedule. The
reward is the window's either way.

Waypoints (WaypointRL): the schedule's level is the highest waypoint any of its windows
reached so far. The policy sees the pair (level, state), packed into one integer, so it
keeps a Q-table per level; a window that raises the level earns `WAYPOINT_REWARD` on top
of the reward. Without waypoints the level stays 0 and the policy sees plain state ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.corpus import Plan
from mallory.learner.coverage import PairCoverage
from mallory.learner.model import NO_MODEL, ModelCoverage, ModelTrace
from mallory.learner.policies import (
    Action,
    Policy,
    canonical_actions,
    make_policy,
    policy_from_state,
)
from mallory.learner.rewards import Reward, make_reward, reward_from_state
from mallory.learner.states import StateMatch, StateStore

#: added to the reward of the window that raises a schedule's waypoint level
WAYPOINT_REWARD = 2.0
#: a waypoint level shifted this far packs (level, state) into the policy's integer state
LEVEL_STRIDE = 1 << 40
MAX_LEVEL = 1000
#: what the policy's state is (see the module docstring)
CONTEXTS = ("state", "faults")


def _checked_context(document: dict[str, Any]) -> str:
    """A checkpoint's context; one saved before contexts existed learnt over states."""
    context = ckpt.field(document, "context", str, "checkpoint") if "context" in document else "state"
    if context not in CONTEXTS:
        raise ckpt.CheckpointError(f"checkpoint.context {context!r} is not one of {', '.join(CONTEXTS)}")
    return context


def policy_state(level: int, state: int) -> int:
    """The integer the policy knows (level, state) by; level 0 is the plain state id."""
    return level * LEVEL_STRIDE + state


class Learner:
    def __init__(
        self,
        store: StateStore,
        reward: Reward,
        policy: Policy,
        coverage: PairCoverage | None = None,
        context: str = "state",
        model_coverage: ModelCoverage | None = None,
    ) -> None:
        if context not in CONTEXTS:
            raise MalloryError(f"unknown learner context {context!r}; choose one of: {', '.join(CONTEXTS)}")
        self.store = store
        self.reward = reward
        self.policy = policy
        self.coverage = coverage if coverage is not None else PairCoverage()
        self.model_coverage = model_coverage if model_coverage is not None else ModelCoverage()
        self.context = context
        #: fault configurations (sorted families) in the order first met: their ids
        self.configurations: dict[tuple[str, ...], int] = {}
        self.state: int | None = None
        #: the current schedule's waypoint level (0: no waypoint reached)
        self.level = 0
        self._action: Action | None = None
        self._acted = False
        self._pending: tuple[int, Action, float, int] | None = None
        # new model states of the schedule in flight, its plan and the steps of it played:
        # not checkpointed, since checkpoints are taken between schedules
        self._new_model_states = 0
        self._plan: Plan | None = None
        self._played = 0

    @classmethod
    def create(
        cls,
        *,
        policy: str = "qlearning",
        reward: str = "paper",
        seed: int = 0,
        num_perm: int = 128,
        threshold: float = 0.7,
        minhash_seed: int = 1,
        policy_params: dict[str, Any] | None = None,
        reward_params: dict[str, Any] | None = None,
        context: str = "state",
    ) -> Learner:
        """A learner from names and parameters (the campaign's configuration)."""
        return cls(
            StateStore(num_perm=num_perm, threshold=threshold, seed=minhash_seed),
            make_reward(reward, **(reward_params or {})),
            make_policy(policy, seed=seed, **(policy_params or {})),
            context=context,
        )

    def observe(
        self,
        summary: Iterable[str],
        pairs: Iterable[str] = (),
        waypoint: int = 0,
        faults: Iterable[str] = (),
        model: ModelTrace | None = None,
    ) -> tuple[StateMatch, float]:
        """The state of the window that just ended, and the reward it earns. `pairs` go into
        the coverage and `model` (None: no model) into the model coverage; `waypoint`
        (0..MAX_LEVEL) may raise the schedule's level; `faults`, the families of the faults
        in force (one per fault), are the "faults" context."""
        if isinstance(waypoint, bool) or not isinstance(waypoint, int) or not 0 <= waypoint <= MAX_LEVEL:
            raise MalloryError(f"a waypoint level is an integer in [0, {MAX_LEVEL}], got {waypoint!r}")
        match = self.store.lookup(summary)
        seen = NO_MODEL if model is None else self.model_coverage.add(model)
        self._new_model_states += seen.new_states
        reward = self.reward(match, self.coverage.add(pairs), seen)
        if waypoint > self.level:
            reward += WAYPOINT_REWARD
            self.level = waypoint
        state = policy_state(self.level, match.state_id if self.context == "state" else self._configuration(faults))
        if self._acted and self.state is not None:
            self._pending = (self.state, self._action, reward, state)
            self._acted = False
        self.state = state
        return match, reward

    def observe_window(
        self,
        summary: Iterable[str] | None,
        pairs: Iterable[str] = (),
        waypoint: int = 0,
        faults: Iterable[str] = (),
        model: ModelTrace | None = None,
    ) -> tuple[StateMatch, float] | None:
        """`observe` for a window the timeline may not have completed in time: `summary` is
        None then (the window is late). A late window teaches nothing and is not folded into
        the next one (its pairs are not counted either): the learner keeps its state, or,
        with none yet (a schedule's start), takes the idle state of the empty summary
        instead of guessing. None when late."""
        if summary is not None:
            return self.observe(summary, pairs, waypoint, faults, model)
        if self.state is None:
            self.observe(frozenset(), faults=faults)
        return None

    def _configuration(self, faults: Iterable[str]) -> int:
        """The id of a fault configuration (a multiset of families), numbered in the order
        the campaign first met each."""
        key = tuple(sorted(faults))
        found = self.configurations.get(key)
        if found is None:
            found = self.configurations[key] = len(self.configurations)
        return found

    def plan(self, actions: Iterable[Action], steps: int, window_s: float, seed: int) -> Plan | None:
        """The policy's plan of the schedule about to start (Policy.plan), None if it
        chooses step by step. This trajectory plays it (see the module docstring)."""
        self._plan, self._played = self.policy.plan(canonical_actions(actions), steps, window_s, seed), 0
        return self._plan

    def next_action(self, actions: Iterable[Action]) -> Action:
        """Learn from the last transition, then choose the action for the current state."""
        if self.state is None:
            raise MalloryError("the learner must observe a window before it can choose an action")
        listed = list(canonical_actions(actions))
        self._flush(listed)
        self._leave_plan()
        return self._took(self.policy.choose(self.state, listed))

    def take(self, action: Action, actions: Iterable[Action]) -> None:
        """`next_action` for an action chosen elsewhere (a worker that decided from a copy of
        the policy when this learner did not answer in time): learn from the last transition
        as `next_action` would, then learn the next one from `action`, which must be one of
        `actions`. A `next_action` already answered for this step is overridden: the
        transition learnt is the one the cluster went through."""
        if self.state is None:
            raise MalloryError("the learner must observe a window before an action can be taken")
        listed = list(canonical_actions(actions))
        if action not in listed:
            raise MalloryError(f"action {action!r} is not one of the actions offered")
        self._flush(listed)
        if self._plan is not None and not self._acted:  # (an override of this step's action is not another step)
            steps = self._plan.steps
            if self._played < len(steps) and steps[self._played].action == action:
                self._played += 1
            else:
                self._leave_plan()
        self._took(action)

    def _leave_plan(self) -> None:
        """Off the plan: it was played as far as here."""
        if self._plan is not None:
            self._plan = self._plan._replace(steps=self._plan.steps[:self._played])

    def _took(self, action: Action) -> Action:
        self._action = action
        self._acted = True
        return action

    @property
    def acting(self) -> Action | None:
        """The action taken since the last window observed (None: none yet)."""
        return self._action if self._acted else None

    def fork(self) -> Learner:
        """A learner for another trajectory through the same knowledge: it shares this one's
        states, coverage, model coverage, reward, policy and fault configurations (what one
        learns, the other knows), and has its own current state, level, pending transition,
        plan and count of the schedule's new model states. Several
        workers' schedules run at once, each on a fork; `to_checkpoint` of the original
        saves the shared knowledge."""
        twin = Learner(self.store, self.reward, self.policy, self.coverage, self.context, self.model_coverage)
        twin.configurations = self.configurations
        return twin

    def end_schedule(self) -> None:
        """The schedule is over: learn its last transition as terminal, tell the policy
        what of its plan was played and the model states it reached first, forget the
        state."""
        self._flush([])
        played = None if self._plan is None else self._plan._replace(steps=self._plan.steps[:self._played])
        self.policy.end_schedule(played, self._new_model_states)
        self._new_model_states = 0
        self._plan, self._played = None, 0
        self.state = None
        self.level = 0
        self._action = None
        self._acted = False

    def _flush(self, next_actions: list[Action]) -> None:
        if self._pending is not None:
            state, action, reward, next_state = self._pending
            self.policy.update(state, action, reward, next_state, next_actions)
            self._pending = None

    # -- checkpoints --------------------------------------------------------------------

    def to_checkpoint(self) -> bytes:
        """Everything needed to resume: states, visits, Q-table, RNG, params (JSON bytes)."""
        pending = None
        if self._pending is not None:
            state, action, reward, next_state = self._pending
            pending = [state, ckpt.encode_action(action), reward, next_state]
        return ckpt.dumps(
            {
                "store": self.store.to_state(),
                "coverage": self.coverage.to_state(),
                "model": self.model_coverage.to_state(),
                "reward": self.reward.to_state(),
                "policy": self.policy.to_state(),
                "state": self.state,
                "level": self.level,
                "context": self.context,
                "configurations": [list(key) for key in self.configurations],
                "action": [ckpt.encode_action(self._action)] if self._acted else None,
                "pending": pending,
            }
        )

    @classmethod
    def from_checkpoint(cls, data: bytes) -> Learner:
        """The learner `to_checkpoint` saved; a corrupt or foreign checkpoint raises
        `MalloryError`."""
        document = ckpt.loads(data)
        coverage = document.get("coverage")  # absent in checkpoints saved before coverage existed
        model = document.get("model")  # absent in checkpoints saved before models existed
        learner = cls(
            StateStore.from_state(ckpt.field(document, "store", dict, "checkpoint"), "store"),
            reward_from_state(ckpt.field(document, "reward", dict, "checkpoint"), "reward"),
            policy_from_state(ckpt.field(document, "policy", dict, "checkpoint"), "policy"),
            None if coverage is None else PairCoverage.from_state(coverage, "coverage"),
            context=_checked_context(document),
            model_coverage=None if model is None else ModelCoverage.from_state(model, "model"),
        )
        configurations = document.get("configurations", [])
        if not isinstance(configurations, list) or not all(
            isinstance(c, list) and all(isinstance(f, str) for f in c) for c in configurations
        ):
            raise ckpt.CheckpointError("checkpoint.configurations is not a list of fault families lists")
        learner.configurations = {tuple(c): i for i, c in enumerate(configurations)}
        level = document.get("level", 0)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= MAX_LEVEL:
            raise ckpt.CheckpointError(f"checkpoint.level {level!r} is not a waypoint level")
        learner.level = level

        known = len(learner.store) if learner.context == "state" else len(learner.configurations)

        def known_state(value: int) -> bool:
            return value // LEVEL_STRIDE <= MAX_LEVEL and 0 <= value % LEVEL_STRIDE < known

        state = ckpt.field(document, "state", (int, type(None)), "checkpoint")
        if state is not None and not known_state(state):
            raise ckpt.CheckpointError(f"checkpoint.state {state} is not one of the {known} stored states")
        learner.state = state
        action = ckpt.field(document, "action", (list, type(None)), "checkpoint")
        if action is not None:
            if len(action) != 1 or state is None:
                raise ckpt.CheckpointError("checkpoint.action must be [action] and needs a current state")
            learner._action = ckpt.decode_action(action[0], "checkpoint.action")
            learner._acted = True
        pending = ckpt.field(document, "pending", (list, type(None)), "checkpoint")
        if pending is not None:
            if (
                len(pending) != 4
                or not all(isinstance(pending[i], int) and known_state(pending[i]) for i in (0, 3))
                or isinstance(pending[2], bool)
                or not isinstance(pending[2], (int, float))
            ):
                raise ckpt.CheckpointError("checkpoint.pending is not [state, action, reward, next state]")
            learner._pending = (
                pending[0],
                ckpt.decode_action(pending[1], "checkpoint.pending"),
                float(pending[2]),
                pending[3],
            )
        return learner
