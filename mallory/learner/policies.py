"""Policies: which fault (action) to take next in a state, behind one interface.

    choose(state, actions) -> action
    update(state, action, reward, next_state, next_actions)

A policy may also plan whole schedules (`plan`, at a schedule's start: modelfuzz does, the
others plan nothing and choose step by step) and hear, at a schedule's end, how many new
model states it reached (`end_schedule`).

States are the integer ids of `StateStore`; actions are opaque hashable labels such as
"partition:majority". The order of `actions` is part of the determinism contract: the same
seed, history and action order give the same choices (a set or frozenset is sorted by
`repr` first, because its iteration order changes between processes). Every policy owns
its `random.Random`; none touches the global RNG.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, ClassVar

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.corpus import Corpus, Plan, mutate, random_plan, well_formed

Action = Hashable

#: Softmax temperature default, measured with bench/bench_learner_temperature.py; see
#: `QLearningPolicy` for the numbers.
DEFAULT_TEMPERATURE = 0.01


def canonical_actions(actions: Iterable[Action]) -> Sequence[Action]:
    """`actions` as a sequence whose order does not depend on the process: sets and
    frozensets are sorted by `repr`, sequences keep their order. Empty is an error."""
    if isinstance(actions, (set, frozenset)):
        listed: Sequence[Action] = sorted(actions, key=repr)
    elif isinstance(actions, (list, tuple)):
        listed = actions
    else:
        listed = list(actions)
    if not listed:
        raise MalloryError("a policy needs at least one action to choose from")
    return listed


def _epsilon_greedy(
    rng: random.Random, epsilon: float, actions: Sequence[Action], value: Callable[[Action], float]
) -> Action:
    """With probability `epsilon` one of `actions` uniformly at random, otherwise one of
    those with the highest `value`, ties broken uniformly at random. It draws `rng.random()`
    and then one `randrange`, in that order, so a seeded policy makes the same choices again."""
    if rng.random() < epsilon:
        return actions[rng.randrange(len(actions))]
    values = [value(a) for a in actions]
    top = max(values)
    best = [a for a, v in zip(actions, values) if v == top]
    return best[rng.randrange(len(best))]


def _number(value: Any, what: str, low: float, high: float, *, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MalloryError(f"{what} must be a number, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        bound = "(" if low_open else "["
        raise MalloryError(f"{what} must be in {bound}{low}, {high}], got {value!r}")
    return float(value)


class Policy(ABC):
    name: ClassVar[str]
    #: whether `choose` reads its state: one that does not (uniform choice, a sampler) can
    #: choose without knowing where the campaign is
    reads_state: ClassVar[bool] = True
    #: whether it learns from a protocol model's states (a campaign without one refuses it)
    needs_model: ClassVar[bool] = False

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise MalloryError(f"policy seed must be an integer, got {seed!r}")
        self.seed = seed
        self.rng = random.Random(seed)

    @abstractmethod
    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        """The action to take in `state`, among `actions`."""

    @abstractmethod
    def update(
        self, state: int, action: Action, reward: float, next_state: int, next_actions: Iterable[Action]
    ) -> None:
        """Learn from one transition; `next_actions` empty means `next_state` is terminal."""

    def plan(self, actions: Iterable[Action], steps: int, window_s: float, seed: int) -> Plan | None:
        """The schedule to play next, planned whole: `steps` steps at most among `actions`,
        windows near `window_s`, `seed` the one the schedule would draw its targets from.
        None: this policy chooses step by step."""
        return None

    def end_schedule(self, played: Plan | None, new_model_states: int) -> None:
        """The schedule ended, having played `played` (the steps of its plan taken, in
        order; None: it had no plan) and reached `new_model_states` model states no
        schedule reached before."""

    def params(self) -> dict[str, Any]:
        return {}

    def to_state(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "params": self.params(), "rng": ckpt.encode_rng(self.rng)}

    def _restore(self, state: dict[str, Any], where: str) -> None:
        """Load what `to_state` wrote beyond name, seed and params."""
        self.rng = ckpt.decode_rng(state.get("rng"), f"{where}.rng")


class RandomPolicy(Policy):
    """The Jepsen baseline: every action uniformly at random, learning nothing."""

    name = "random"
    reads_state = False

    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        listed = canonical_actions(actions)
        return listed[self.rng.randrange(len(listed))]

    def update(
        self, state: int, action: Action, reward: float, next_state: int, next_actions: Iterable[Action]
    ) -> None:
        return None


class SamplerPolicy(Policy):
    """A policy that is a fault sampler's, not a learner's: every step takes `fault`, one
    label each enactment of which draws a whole window's schedule of faults (the
    lossy-synchronous rounds of nemesis/faults/round_schedule.py and their baselines). The
    campaign still observes states and coverage; nothing is learnt from them. The fault must
    be among the actions (`mallory fuzz --policy NAME` enables it); MalloryError otherwise."""

    fault: ClassVar[str]
    reads_state = False

    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        listed = canonical_actions(actions)
        if self.fault not in listed:
            offered = ", ".join(map(str, listed))
            raise MalloryError(f"policy {self.name} takes {self.fault}, which is not among the faults offered ({offered})")
        return self.fault

    def update(
        self, state: int, action: Action, reward: float, next_state: int, next_actions: Iterable[Action]
    ) -> None:
        return None


class RoundsPolicy(SamplerPolicy):
    """Lossy-synchronous rounds (Drăgoi et al., OOPSLA'20): at most d faulty processes per
    round, k rounds of recovery."""

    name = "rounds"
    fault = "rounds:lossy-sync"


class RandomDropPolicy(SamplerPolicy):
    """The rounds' first baseline: every link loses every round with probability p."""

    name = "random-drop"
    fault = "rounds:random-drop"


class PoissonCrashPolicy(SamplerPolicy):
    """The rounds' second baseline: crashes arriving as a Poisson process of rate λ."""

    name = "poisson-crash"
    fault = "crash:poisson"


#: What an untried (state, action) pair is worth; see `_QPolicy`.
PRIORS = ("optimistic", "shared")
DEFAULT_PRIOR = "shared"


class _QPolicy(Policy):
    """Tabular Q-learning; subclasses decide how Q-values turn into a choice.

    Q(s, a) <- Q(s, a) + alpha * (r + gamma * max_a' Q(s', a') - Q(s, a)), where the max
    runs over `next_actions` and is 0 when there are none (end of a schedule).

    The prior says where an untried pair starts. "optimistic": at `q_init` = 0, which is
    optimistic under rewards in [-1, 0], so every action is tried once in every state
    before any is repeated. "shared": at the mean Q of that action over the states where it
    was tried (`q_init` if none), so a state met for the first time, and the untried
    actions of a known one, lean on what the action did elsewhere. Why: in a real campaign
    most states are met once (70% in the hour-long example-SUT run) and there are ~40
    actions, so under the optimistic prior nearly every choice is "some untried action",
    i.e. close to random. Measured (the default since): toy campaign of
    bench/bench_learner_temperature.py, 100 seeds, distinct states 343.3 vs 301.2 for
    qlearning, 336.4 vs 298.5 for epsilon-greedy(0.1) (random 220.5); a 35-minute
    example-SUT campaign beside random (bench/bench_campaign_policies.py --seeds 2
    --side-by-side): 405 vs 322 states (1.26x), where the optimistic prior had 336 vs 327.
    """

    def __init__(
        self, seed: int = 0, alpha: float = 0.1, gamma: float = 0.6, q_init: float = 0.0, prior: str = DEFAULT_PRIOR
    ) -> None:
        super().__init__(seed)
        self.alpha = _number(alpha, f"{self.name}: alpha", 0.0, 1.0, low_open=True)
        self.gamma = _number(gamma, f"{self.name}: gamma", 0.0, 1.0)
        self.q_init = _number(q_init, f"{self.name}: q_init", -1e9, 1e9)
        if prior not in PRIORS:
            raise MalloryError(f"{self.name}: prior must be one of {', '.join(PRIORS)}, got {prior!r}")
        self.prior = prior
        self.q: dict[int, dict[Action, float]] = {}
        self._shared: dict[Action, float] = {}  # action -> mean Q where tried; dropped when it changes

    def q_value(self, state: int, action: Action) -> float:
        row = self.q.get(state)
        if row is not None and action in row:
            return row[action]
        return self.untried_value(action)

    def untried_value(self, action: Action) -> float:
        """Where an untried pair of `action` starts, under this policy's prior."""
        if self.prior == "optimistic":
            return self.q_init
        if action not in self._shared:
            tried = [row[action] for row in self.q.values() if action in row]
            # fsum is exact, so the mean does not depend on the order the rows were filled
            # in (a resumed campaign makes the same choices as an uninterrupted one).
            self._shared[action] = math.fsum(tried) / len(tried) if tried else self.q_init
        return self._shared[action]

    def update(
        self, state: int, action: Action, reward: float, next_state: int, next_actions: Iterable[Action]
    ) -> None:
        next_listed = list(next_actions)
        future = max((self.q_value(next_state, a) for a in next_listed), default=0.0)
        old = self.q_value(state, action)
        self._set(state, action, old + self.alpha * (reward + self.gamma * future - old))

    def _set(self, state: int, action: Action, value: float) -> None:
        self.q.setdefault(state, {})[action] = value
        self._shared.pop(action, None)

    def params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "q_init": self.q_init, "prior": self.prior}

    def to_state(self) -> dict[str, Any]:
        rows = [
            [state, ckpt.encode_action(action), value] for state, row in self.q.items() for action, value in row.items()
        ]
        rows.sort(key=lambda r: (r[0], repr(r[1])))
        return {**super().to_state(), "q": rows}

    def _restore(self, state: dict[str, Any], where: str) -> None:
        super()._restore(state, where)
        for i, row in enumerate(ckpt.field(state, "q", list, where)):
            here = f"{where}.q[{i}]"
            if (
                not isinstance(row, list)
                or len(row) != 3
                or not isinstance(row[0], int)
                or isinstance(row[0], bool)
                or isinstance(row[2], bool)
                or not isinstance(row[2], (int, float))
            ):
                raise ckpt.CheckpointError(f"{here} is not [state, action, value]")
            self._set(row[0], ckpt.decode_action(row[1], here), float(row[2]))


class QLearningPolicy(_QPolicy):
    """Q-learning with softmax (Boltzmann) selection: P(a) ~ exp(Q(s, a) / temperature).

    Why temperature 0.01. Q-values live on the reward scale: with rewards in [-1, 0],
    alpha 0.1 and gamma 0.6, one visit that ends in an already-seen state moves an untried
    Q of 0 to -0.1, and Q never leaves [-2.5, 0]. The ratio of selection probabilities
    between an untried action and one tried once is exp(0.1 / T): 1.001 at T = 100 (the
    setting the issue calls uniform in practice), 1.1 at T = 1, 2.7 at T = 0.1, 7.4 at
    T = 0.05, 22000 at T = 0.01; between two tried actions whose Q differ by 0.01 it is
    still only e at T = 0.01, so softmax keeps mixing among similar actions.
    bench/bench_learner_temperature.py measures it in a toy campaign (8 actions whose
    chance of reaching a never-seen state ranges from 0.02 to 0.4, otherwise one of 6
    recurring states; the paper's reward; 1500 steps; 100 seeds; "drift": the chances are
    reversed halfway). Distinct states found, mean (standard error):

                     stationary    drift               stationary    drift
        random       220.5 (1.3)  220.3 (1.2)  T=0.03  293.3 (2.0)  292.9 (2.0)
        T=100        221.7 (1.5)  219.7 (1.3)  T=0.02  298.7 (1.9)  294.6 (1.9)
        T=1          234.3 (1.5)  227.9 (1.5)  T=0.01  301.2 (2.2)  298.2 (2.0)
        T=0.1        282.3 (1.8)  274.9 (1.6)  T=0.005 298.5 (2.2)  297.0 (2.0)
        T=0.05       291.9 (1.9)  287.9 (1.7)  epsilon-greedy(0.1) 298.5 / 295.0

    T = 100 is random in practice. Exploration improves down to a plateau from T = 0.02
    to 0.005 (a second set of 100 seeds ranks those three differently, within noise);
    0.01 is its middle and was the best in both settings here. A test pins that the
    default discriminates at reward scale.
    """

    name = "qlearning"

    def __init__(
        self,
        seed: int = 0,
        alpha: float = 0.1,
        gamma: float = 0.6,
        temperature: float = DEFAULT_TEMPERATURE,
        q_init: float = 0.0,
        prior: str = DEFAULT_PRIOR,
    ) -> None:
        super().__init__(seed, alpha, gamma, q_init, prior)
        self.temperature = _number(temperature, "qlearning: temperature", 0.0, 1e6, low_open=True)

    def probabilities(self, state: int, actions: Iterable[Action]) -> list[float]:
        """The softmax distribution `choose` samples from, in the order of `actions`."""
        weights = self._weights(state, canonical_actions(actions))
        total = math.fsum(weights)
        return [w / total for w in weights]

    def _weights(self, state: int, actions: Sequence[Action]) -> list[float]:
        values = [self.q_value(state, a) for a in actions]
        top = max(values)
        return [math.exp((v - top) / self.temperature) for v in values]

    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        listed = canonical_actions(actions)
        weights = self._weights(state, listed)
        u = self.rng.random() * math.fsum(weights)
        cumulative = 0.0
        for action, weight in zip(listed, weights):
            cumulative += weight
            if u < cumulative:
                return action
        # u within rounding of the total: the last action that has any weight
        return next(a for a, w in zip(reversed(listed), reversed(weights)) if w > 0.0)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "temperature": self.temperature}


class EpsilonGreedyPolicy(_QPolicy):
    """Q-learning with epsilon-greedy selection: with probability epsilon a uniformly random
    action, otherwise one with the highest Q-value (ties broken uniformly at random)."""

    name = "epsilon-greedy"

    def __init__(
        self,
        seed: int = 0,
        alpha: float = 0.1,
        gamma: float = 0.6,
        epsilon: float = 0.1,
        q_init: float = 0.0,
        prior: str = DEFAULT_PRIOR,
    ) -> None:
        super().__init__(seed, alpha, gamma, q_init, prior)
        self.epsilon = _number(epsilon, "epsilon-greedy: epsilon", 0.0, 1.0)

    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        return _epsilon_greedy(self.rng, self.epsilon, canonical_actions(actions), lambda a: self.q_value(state, a))

    def params(self) -> dict[str, Any]:
        return {**super().params(), "epsilon": self.epsilon}


class BonusMaxPolicy(Policy):
    """BonusMaxRL (Borgarelli, Enea, Majumdar, Nagendra: "Reward augmentation in
    reinforcement learning for testing distributed systems", OOPSLA'24): Q-learning whose
    reward is a decaying exploration bonus, backed up with a max instead of a sum.

        N(s, a) += 1
        Q(s, a) <- (1 - alpha) Q(s, a) + alpha * max(1 / N(s, a) + r, gamma * max_a' Q(s', a'))

    Untried pairs start at Q = 1, the first visit's bonus; from the second visit on the
    bonus decays, so the actions visited least in a state are preferred there. Choices are
    greedy (ties broken at random) with probability 1 - epsilon, uniform otherwise. The max keeps a path to a rarely tried
    corner valuable from far away without letting long paths add up bonuses. `r` is the
    learner's reward: with the "none" reward only waypoint level-ups (+2) add to the bonus;
    another reward in [-1, 0] takes from it what the window was not worth. Its authors'
    code (zeu5/dist-rl-testing, policies/bonusmax.go) counts visits of (s, a), as here.
    """

    name = "bonus-max"

    def __init__(self, seed: int = 0, alpha: float = 0.1, gamma: float = 0.95, epsilon: float = 0.05) -> None:
        super().__init__(seed)
        self.alpha = _number(alpha, "bonus-max: alpha", 0.0, 1.0, low_open=True)
        self.gamma = _number(gamma, "bonus-max: gamma", 0.0, 1.0)
        self.epsilon = _number(epsilon, "bonus-max: epsilon", 0.0, 1.0)
        self.q: dict[int, dict[Action, float]] = {}
        self.visits: dict[int, dict[Action, int]] = {}

    def q_value(self, state: int, action: Action) -> float:
        return self.q.get(state, {}).get(action, 1.0)

    def choose(self, state: int, actions: Iterable[Action]) -> Action:
        return _epsilon_greedy(self.rng, self.epsilon, canonical_actions(actions), lambda a: self.q_value(state, a))

    def update(
        self, state: int, action: Action, reward: float, next_state: int, next_actions: Iterable[Action]
    ) -> None:
        visits = self.visits.setdefault(state, {})
        n = visits[action] = visits.get(action, 0) + 1
        future = max((self.q_value(next_state, a) for a in next_actions), default=0.0)
        old = self.q_value(state, action)
        self.q.setdefault(state, {})[action] = (1 - self.alpha) * old + self.alpha * max(1.0 / n + reward, self.gamma * future)

    def params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "epsilon": self.epsilon}

    def to_state(self) -> dict[str, Any]:
        rows = [
            [state, ckpt.encode_action(action), value, self.visits.get(state, {}).get(action, 0)]
            for state, row in self.q.items()
            for action, value in row.items()
        ]
        rows.sort(key=lambda r: (r[0], repr(r[1])))
        return {**super().to_state(), "q": rows}

    def _restore(self, state: dict[str, Any], where: str) -> None:
        super()._restore(state, where)
        for i, row in enumerate(ckpt.field(state, "q", list, where)):
            if (
                not isinstance(row, list)
                or len(row) != 4
                or not all(isinstance(row[k], int) and not isinstance(row[k], bool) for k in (0, 3))
                or isinstance(row[2], bool)
                or not isinstance(row[2], (int, float))
                or row[3] < 1
            ):
                raise ckpt.CheckpointError(f"{where}.q[{i}] is not [state, action, value, visits]")
            action = ckpt.decode_action(row[1], f"{where}.q[{i}]")
            self.q.setdefault(row[0], {})[action] = float(row[2])
            self.visits.setdefault(row[0], {})[action] = row[3]


class ModelFuzzPolicy(RandomPolicy):
    """ModelFuzz (OOPSLA'25; the thesis' ch. 5): the unit is a schedule, the feedback the
    protocol model's states. While the corpus (learner/corpus.py) is empty, or holds no
    schedule this campaign can play, a schedule is random; then it is a corpus entry,
    picked with probability proportional to its energy, after 1 to `max_mutations`
    mutations. A schedule that reached new model states is kept with that many as its
    energy; nothing is learnt step by step.

    The plan is played by the trajectory that asked for it (`Learner.plan`: the loop enacts
    its steps with their draws and windows, from the plan's seed), so several workers'
    schedules can play plans of one policy at once; `end_schedule` hears what was played.
    Asked to `choose` (past a plan, or a caller that only asks step by step, as the Jepsen
    advisor does), it chooses uniformly at random (RandomPolicy's `choose` and `update`). A
    schedule in progress is not checkpointed: checkpoints are taken between schedules.
    """

    name = "modelfuzz"
    needs_model = True
    reads_state = False

    def __init__(self, seed: int = 0, max_mutations: int = 3) -> None:
        super().__init__(seed)
        if isinstance(max_mutations, bool) or not isinstance(max_mutations, int) or max_mutations < 1:
            raise MalloryError(f"modelfuzz: max_mutations must be an integer >= 1, got {max_mutations!r}")
        self.max_mutations = max_mutations
        self.corpus = Corpus()

    def plan(self, actions: Iterable[Action], steps: int, window_s: float, seed: int) -> Plan:
        listed = [str(a) for a in canonical_actions(actions)]
        parent = self.corpus.pick(self.rng, lambda p: well_formed(p, listed, steps, window_s))
        if parent is None:
            plan = random_plan(self.rng, listed, steps, seed)
        else:
            count = 1 + self.rng.randrange(self.max_mutations)
            plan = mutate(self.rng, self.corpus.entries[parent].plan, parent, listed, steps, window_s, count)
        return plan

    def end_schedule(self, played: Plan | None, new_model_states: int) -> None:
        """Keep the steps played (a schedule cut short keeps what it played) if they
        reached new model states."""
        if played is not None and played.steps and new_model_states > 0:
            self.corpus.add(played, new_model_states)

    def params(self) -> dict[str, Any]:
        return {"max_mutations": self.max_mutations}

    def to_state(self) -> dict[str, Any]:
        return {**super().to_state(), "corpus": self.corpus.to_state()}

    def _restore(self, state: dict[str, Any], where: str) -> None:
        super()._restore(state, where)
        self.corpus = Corpus.from_state(ckpt.field(state, "corpus", list, where), f"{where}.corpus")


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (QLearningPolicy, EpsilonGreedyPolicy, BonusMaxPolicy, RandomPolicy, RoundsPolicy, RandomDropPolicy,
                PoissonCrashPolicy, ModelFuzzPolicy)
}
#: the sampler policies' names -> the one fault each takes
SAMPLER_FAULTS: dict[str, str] = {
    name: cls.fault for name, cls in POLICIES.items() if issubclass(cls, SamplerPolicy)
}


def make_policy(name: str, seed: int = 0, **params: Any) -> Policy:
    """The policy called `name` (see `POLICIES`), seeded with `seed`, built with `params`."""
    cls = POLICIES.get(name)
    if cls is None:
        raise MalloryError(f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}")
    try:
        return cls(seed=seed, **params)
    except TypeError as exc:
        raise MalloryError(f"policy {name!r}: bad parameters {params!r} ({exc})") from None


def policy_from_state(state: Any, where: str = "policy") -> Policy:
    name = ckpt.field(state, "name", str, where)
    seed = ckpt.field(state, "seed", int, where)
    params = ckpt.field(state, "params", dict, where)
    if issubclass(POLICIES.get(name, Policy), _QPolicy) and "prior" not in params:
        params = {**params, "prior": "optimistic"}  # saved before there was a choice: keep its behaviour
    try:
        policy = make_policy(name, seed=seed, **params)
    except MalloryError as exc:
        raise ckpt.CheckpointError(f"{where}: {exc}") from None
    policy._restore(state, where)
    return policy
