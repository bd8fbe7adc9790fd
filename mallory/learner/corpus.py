"""ModelFuzz's schedules, corpus and mutations (ModelFuzz, OOPSLA'25; the thesis' ch. 5),
pure: no I/O.

A schedule the fuzzer plans is a `Plan`: the seed its faults draw their targets from, and
its steps, each a fault label (or `heal`, `noop`), the draw whose random numbers pick the
fault's targets (the loop's `step_rng(seed, draw)`) and its window (None: the campaign's).
The same plan enacted again hits the same nodes: a kept schedule is a schedule, not a list
of labels whose targets change with every replay.

A schedule that reached new model states enters the `Corpus` with energy equal to how many
it reached; a new schedule is a mutation of an entry picked with probability proportional
to its energy. Each mutation (`MUTATIONS`) keeps a plan well-formed (`well_formed`: 1 to
`max_steps` steps, every action one of the campaign's, draws >= 0, windows None or within
a factor WINDOW_RANGE of the campaign's):

    swap       two steps trade places (each keeps its draw, so its targets)
    respec     a fault becomes another of its family ("partition:one" -> "partition:majority")
    replace    a step becomes any other action (its draw kept)
    redraw     a fault moves to other nodes (a fresh draw)
    window     a step's window halves or doubles
    drop       a step is left out
    duplicate  a step is taken twice in a row

`replace` is not in the issue's list; without it a corpus could never gain a fault family
none of its schedules has (tried on the reference model of tests/unit/learner/
test_modelfuzz.py, the corpus stayed on its first, random entry for 1500 schedules).
ModelFuzz's message-level mutations (swap two deliveries, change which process crashes)
need schedules that order messages; Mallory's order faults, so "which process crashes" is
`redraw` of a kill or stop, and deliveries are not planned.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mallory.learner import checkpoint as ckpt

#: a step's window stays within [window / WINDOW_RANGE, window * WINDOW_RANGE]
WINDOW_RANGE = 4.0
#: a fresh draw is below this (any int >= 0 is a draw; this keeps them readable)
DRAWS = 1 << 31
#: actions that are no fault: they have no family to respec nor targets to redraw
NOT_FAULTS = ("heal", "noop")


class PlannedStep(NamedTuple):
    action: str
    draw: int
    window_s: float | None = None


class Plan(NamedTuple):
    """A schedule to play, and where it came from: the corpus entry it mutates (None: a
    random schedule) and the mutations applied, in order."""

    seed: int
    steps: tuple[PlannedStep, ...]
    parent: int | None = None
    mutations: tuple[str, ...] = ()


def well_formed(plan: Plan, actions: Sequence[str], max_steps: int, window_s: float) -> bool:
    """Whether the campaign (its actions, steps per schedule and window) can play `plan`."""
    offered = set(actions)
    return 1 <= len(plan.steps) <= max_steps and all(
        step.action in offered
        and isinstance(step.draw, int) and step.draw >= 0
        and (step.window_s is None or window_s / WINDOW_RANGE <= step.window_s <= window_s * WINDOW_RANGE)
        for step in plan.steps
    )


def random_plan(rng: random.Random, actions: Sequence[str], steps: int, seed: int) -> Plan:
    """`steps` actions uniformly at random, drawing as the loop does (draw = position)."""
    return Plan(seed, tuple(PlannedStep(actions[rng.randrange(len(actions))], i) for i in range(steps)))


# Each mutation: (rng, steps, actions, max_steps, window_s) -> new steps, or None when it
# cannot apply to these steps (too short to swap, no fault to redraw, ...).
Steps = tuple[PlannedStep, ...]
Mutation = Callable[[random.Random, Steps, Sequence[str], int, float], Steps | None]


def _faults(steps: Steps) -> list[int]:
    return [i for i, s in enumerate(steps) if s.action not in NOT_FAULTS]


def swap(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int, window_s: float) -> Steps | None:
    if len(steps) < 2:
        return None
    i, j = rng.sample(range(len(steps)), 2)
    out = list(steps)
    out[i], out[j] = out[j], out[i]
    return tuple(out)


def respec(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int, window_s: float) -> Steps | None:
    options = []
    for i in _faults(steps):
        family = steps[i].action.partition(":")[0]
        options += [(i, a) for a in actions if a.partition(":")[0] == family and a != steps[i].action]
    if not options:
        return None
    i, action = options[rng.randrange(len(options))]
    return steps[:i] + (steps[i]._replace(action=action),) + steps[i + 1:]


def replace(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int,
            window_s: float) -> Steps | None:
    if len(actions) < 2:
        return None
    i = rng.randrange(len(steps))
    others = [a for a in actions if a != steps[i].action]
    return steps[:i] + (steps[i]._replace(action=others[rng.randrange(len(others))]),) + steps[i + 1:]


def redraw(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int, window_s: float) -> Steps | None:
    faults = _faults(steps)
    if not faults:
        return None
    i = faults[rng.randrange(len(faults))]
    draw = rng.randrange(DRAWS)
    return steps[:i] + (steps[i]._replace(draw=draw),) + steps[i + 1:]


def window(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int, window_s: float) -> Steps | None:
    i = rng.randrange(len(steps))
    now = steps[i].window_s or window_s
    factors = [f for f in (0.5, 2.0) if window_s / WINDOW_RANGE <= now * f <= window_s * WINDOW_RANGE]
    new = now * factors[rng.randrange(len(factors))]  # the range spans 16x: one factor always fits
    return steps[:i] + (steps[i]._replace(window_s=None if new == window_s else new),) + steps[i + 1:]


def drop(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int, window_s: float) -> Steps | None:
    if len(steps) < 2:
        return None
    i = rng.randrange(len(steps))
    return steps[:i] + steps[i + 1:]


def duplicate(rng: random.Random, steps: Steps, actions: Sequence[str], max_steps: int,
              window_s: float) -> Steps | None:
    if len(steps) >= max_steps:
        return None
    i = rng.randrange(len(steps))
    return steps[:i + 1] + steps[i:]


MUTATIONS: dict[str, Mutation] = {f.__name__: f for f in (swap, respec, replace, redraw, window, drop, duplicate)}


def mutate(rng: random.Random, plan: Plan, parent: int, actions: Sequence[str], max_steps: int, window_s: float,
           count: int) -> Plan:
    """`plan` (corpus entry `parent`) after `count` mutations drawn uniformly among those
    that apply; the plan keeps its seed, so unmutated steps keep their targets."""
    steps = plan.steps
    applied = []
    for _ in range(count):
        names = list(MUTATIONS)
        rng.shuffle(names)
        for name in names:  # the first in random order that applies
            changed = MUTATIONS[name](rng, steps, actions, max_steps, window_s)
            if changed is not None:
                steps = changed
                applied.append(name)
                break
    return Plan(plan.seed, steps, parent, tuple(applied))


@dataclass(frozen=True)
class Entry:
    """A schedule kept in the corpus, and the model states it reached first: its energy."""

    plan: Plan
    new_states: int


@dataclass
class Corpus:
    """The kept schedules, in the order found (an entry's id is its position)."""

    entries: list[Entry] = field(default_factory=list)

    def add(self, plan: Plan, new_states: int) -> int:
        if new_states < 1:
            raise ValueError("a corpus entry must have reached a new model state")
        self.entries.append(Entry(plan, new_states))
        return len(self.entries) - 1

    def pick(self, rng: random.Random, fits: Callable[[Plan], bool]) -> int | None:
        """An entry's id, with probability proportional to its energy among the entries
        that fit (the campaign can play them); None when none does."""
        ids = [i for i, e in enumerate(self.entries) if fits(e.plan)]
        if not ids:
            return None
        u = rng.random() * sum(self.entries[i].new_states for i in ids)
        for i in ids:
            u -= self.entries[i].new_states
            if u < 0:
                return i
        return ids[-1]  # u within rounding of the total

    def entry_json(self, i: int) -> dict[str, Any]:
        """Entry `i` as JSON (a checkpoint's row, and its file in the campaign directory)."""
        entry = self.entries[i]
        plan = entry.plan
        return {"id": i, "new_model_states": entry.new_states, "seed": plan.seed, "parent": plan.parent,
                "mutations": list(plan.mutations),
                "steps": [{"action": s.action, "draw": s.draw, "window_s": s.window_s} for s in plan.steps]}

    def to_state(self) -> list[dict[str, Any]]:
        return [self.entry_json(i) for i in range(len(self.entries))]

    @classmethod
    def from_state(cls, state: Any, where: str = "corpus") -> Corpus:
        if not isinstance(state, list):
            raise ckpt.CheckpointError(f"{where} is not a list of entries")
        corpus = cls()
        for i, row in enumerate(state):
            here = f"{where}[{i}]"
            new = ckpt.field(row, "new_model_states", int, here)
            seed = ckpt.field(row, "seed", int, here)
            parent = ckpt.field(row, "parent", (int, type(None)), here)
            mutations = ckpt.field(row, "mutations", list, here)
            rows = ckpt.field(row, "steps", list, here)
            if new < 1 or not rows or (parent is not None and not 0 <= parent < i) or not all(
                    isinstance(m, str) for m in mutations):
                raise ckpt.CheckpointError(f"{here} is not a corpus entry")
            steps = []
            for k, step in enumerate(rows):
                action = ckpt.field(step, "action", str, f"{here}.steps[{k}]")
                draw = ckpt.field(step, "draw", int, f"{here}.steps[{k}]")
                window_s = ckpt.field(step, "window_s", (int, float, type(None)), f"{here}.steps[{k}]")
                if draw < 0 or (window_s is not None and window_s <= 0):
                    raise ckpt.CheckpointError(f"{here}.steps[{k}] is not a planned step")
                steps.append(PlannedStep(action, draw, None if window_s is None else float(window_s)))
            corpus.add(Plan(seed, tuple(steps), parent, tuple(mutations)), new)
        return corpus
