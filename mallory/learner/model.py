"""Protocol models (ModelFuzz, OOPSLA'25): coverage measured on an abstract model of the
protocol instead of on the implementation.

A model is a small state machine a person writes in Python, after the protocol's
specification: an initial state, named actions, and a hashable abstraction of a state. A
mapping names, for each Mallory event the model takes, the action it stands for. Replaying
an execution's events through the model gives the model states it reached: distinct states
(and transitions) over a campaign are its model coverage, independent of Mallory's state
abstraction, the similarity threshold and the implementation's code.

    model = Model.from_namespace(vars(module), "suts/raft/model.py")
    replay = ModelReplay(model, ("n1", "n2", "n3"))   # one execution: a schedule
    trace = replay.run(steps)                         # a window's events, in causal order
    seen = coverage.add(trace)                        # ModelCoverage: the campaign's

The contract of a model module (its names, read by `Model.from_namespace`):

    NAME        str: what reports call the model
    initial     (nodes: tuple[str, ...]) -> state: the state an execution starts in
    ACTIONS     {action name: (state, step) -> next state, or None if the model cannot
                take the step in that state}; a state is never changed in place
    abstract    (state) -> the state's abstraction, built of str, int, bool, None, tuples
                and frozensets (it becomes a key: `state_key`)
    EVENTS      {Mallory event name: action name}, the mapping. Event names are an
                annotation's label ("became-leader"), a log event's name
                ("libraft-vote-granted"), "fault:<family>" for a fault the fuzzer took
                ("fault:partition"; "fault:heal" heals every fault in force), or
                "fault:<family>:<spec>" for one action ("fault:membership:remove"), and
                "client:<f>:<type>" for a client operation ("client:write:ok")

A `Step` carries what the event carries: its name and the node it happened on; a fault
also its target nodes and the links it cut (src, dst). Code and log events carry no values
(no term, no index), so a model sees what happened where and in which causal order, never
the numbers: it abstracts over them.

A step the model cannot take (its action returns None) is a *mismatch*: the model state
stays as it was and the step's event name is counted. A mismatch is either the
implementation doing what the protocol forbids or the model being wrong (or an event lost
on the way); either is worth a look, and the report lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mallory.errors import MalloryError
from mallory.learner import checkpoint as ckpt
from mallory.learner.coverage import count_keys


class Step(NamedTuple):
    """One Mallory event as a model sees it (see the module docstring for `event` names)."""

    event: str
    node: str
    targets: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()


Action = Callable[[Any, Step], Any]


@dataclass(frozen=True)
class Model:
    """A protocol model and its mapping from Mallory events to its actions."""

    name: str
    initial: Callable[[tuple[str, ...]], Any]
    actions: Mapping[str, Action]
    abstract: Callable[[Any], Hashable]
    events: Mapping[str, str]

    def __post_init__(self) -> None:
        unknown = sorted({a for a in self.events.values() if a not in self.actions})
        if unknown:
            raise MalloryError(f"model {self.name}: EVENTS maps to actions it does not define: {', '.join(unknown)}")

    @classmethod
    def from_namespace(cls, namespace: Mapping[str, Any], source: str) -> Model:
        """The model a module's names define (the contract above); MalloryError naming
        `source` and what is missing or malformed."""

        def get(name: str, check: Callable[[Any], bool], what: str) -> Any:
            value = namespace.get(name)
            if value is None or not check(value):
                raise MalloryError(f"{source}: a model module needs {name}, {what}")
            return value

        def callables(mapping: Any) -> bool:
            return isinstance(mapping, Mapping) and all(isinstance(k, str) and callable(v) for k, v in mapping.items())

        def names(mapping: Any) -> bool:
            return isinstance(mapping, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())

        fields = {
            "name": get("NAME", lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
            "initial": get("initial", callable, "a function of the node names"),
            "actions": dict(get("ACTIONS", callables, "a dict of action names to functions (state, step)")),
            "abstract": get("abstract", callable, "a function of a state"),
            "events": dict(get("EVENTS", names, "a dict of Mallory event names to action names")),
        }
        try:
            return cls(**fields)
        except MalloryError as exc:
            raise MalloryError(f"{source}: {exc}") from None


def cut_off(nodes: Sequence[str], links: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The nodes that cannot exchange messages both ways with a majority of `nodes`
    (themselves included) when `links` (src, dst) are dropped: a helper for models, since
    a Raft node needs a majority's answers to be elected or to commit."""
    dropped = set(links)
    need = len(nodes) // 2 + 1
    return frozenset(n for n in nodes
                     if 1 + sum((n, m) not in dropped and (m, n) not in dropped for m in nodes if m != n) < need)


def state_key(value: Any) -> str:
    """A canonical text of an abstract state: equal abstractions give equal keys, whatever
    the order of a frozenset's members. TypeError for what an abstraction may not hold."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(state_key(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(state_key(v) for v in value)) + "}"
    raise TypeError(f"a model state's abstraction holds str, int, bool, None, tuples and frozensets, not {type(value).__name__}")


@dataclass(frozen=True)
class ModelTrace:
    """What one window did in the model: the abstract states it was in (the one it started
    in included), the transitions it took ("state -action-> state", by keys), and the event
    names of the steps the model could not take, one per step."""

    states: frozenset[str]
    transitions: frozenset[str] = frozenset()
    mismatches: tuple[str, ...] = ()


class ModelReplay:
    """One execution through the model: the current state, fed window by window."""

    def __init__(self, model: Model, nodes: Sequence[str]) -> None:
        self.model = model
        self.nodes = tuple(nodes)
        self.state: Any = model.initial(self.nodes)

    def restart(self) -> None:
        """Back to the initial state: a new execution, or one whose events were lost."""
        self.state = self.model.initial(self.nodes)

    def key(self) -> str:
        return state_key(self.model.abstract(self.state))

    def run(self, steps: Iterable[Step]) -> ModelTrace:
        """Take the steps in order. An event the mapping does not name is not the model's
        business and is skipped; a step whose action refuses it is a mismatch."""
        model = self.model
        here = self.key()
        states = {here}
        transitions = set()
        mismatches = []
        for step in steps:
            action = model.events.get(step.event)
            if action is None:
                continue
            after = model.actions[action](self.state, step)
            if after is None:
                mismatches.append(step.event)
                continue
            self.state = after
            there = self.key()
            states.add(there)
            transitions.add(f"{here} -{action}-> {there}")
            here = there
        return ModelTrace(frozenset(states), frozenset(transitions), tuple(mismatches))


@dataclass(frozen=True)
class ModelSeen:
    """What one window added to the model coverage: how many distinct states and
    transitions it showed and how many of them were new, its mismatches, and `rarest`: the
    lowest count (windows that showed it, this one included) among its states and
    transitions (0 when it showed none: no model)."""

    states: int
    new_states: int
    transitions: int
    new_transitions: int
    mismatches: int
    rarest: int


#: what a window added when the campaign has no model
NO_MODEL = ModelSeen(0, 0, 0, 0, 0, 0)


@dataclass
class ModelCoverage:
    """The campaign's model coverage: every abstract state and transition seen, with the
    number of windows that showed it, and the mismatches by event name."""

    states: dict[str, int] = field(default_factory=dict)
    transitions: dict[str, int] = field(default_factory=dict)
    mismatches: dict[str, int] = field(default_factory=dict)

    def add(self, trace: ModelTrace) -> ModelSeen:
        new_states, low_states = count_keys(self.states, trace.states)
        new_transitions, low_transitions = count_keys(self.transitions, trace.transitions)
        for event in trace.mismatches:
            self.mismatches[event] = self.mismatches.get(event, 0) + 1
        rarest = min([n for n in (low_states, low_transitions) if n], default=0)
        return ModelSeen(len(trace.states), new_states, len(trace.transitions), new_transitions,
                         len(trace.mismatches), rarest)

    def mismatch_count(self) -> int:
        return sum(self.mismatches.values())

    def to_state(self) -> dict[str, Any]:
        return {name: sorted([key, count] for key, count in getattr(self, name).items())
                for name in ("states", "transitions", "mismatches")}

    @classmethod
    def from_state(cls, state: Any, where: str = "model") -> ModelCoverage:
        coverage = cls()
        for name in ("states", "transitions", "mismatches"):
            counts = getattr(coverage, name)
            for i, row in enumerate(ckpt.field(state, name, list, where)):
                if (not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str)
                        or isinstance(row[1], bool) or not isinstance(row[1], int) or row[1] < 1):
                    raise ckpt.CheckpointError(f"{where}.{name}[{i}] is not [key, positive count]")
                counts[row[0]] = row[1]
        return coverage
