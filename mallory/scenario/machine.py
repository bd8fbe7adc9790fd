"""The scenario's state machine: the property a run is checked against, after Netrix's
(netrix sm/sm.go; the test's outcome: testlib/testcase.go, testlib/execution.go).

States are labels. Every machine has START ("startState", where a run begins), FAIL
("failState") and SUCCESS ("successState", a success state); `mark_success` makes any other
state one too. A builder adds transitions, each a condition and a target, from the state it
stands at, and moves to the target:

    machine = StateMachine()
    machine.builder().on(IsMessageType("append"), "cut").on(IsEventType("truncate"), SUCCESS)
    machine.builder("cut").on(IsEventType("stall-catchup-applied"), FAIL)

A run steps on every event: the transitions of the current state are tried in the order
they were added and the first whose condition holds is taken; at most one per event, none
when no condition holds. (Two transitions from one state to one target are both kept;
Netrix's map of transitions by target keeps the last one's condition.) The run's outcome is Netrix's assertion: it passes when it ends in
a success state. It ends when it reaches FAIL (Netrix aborts the test there) or at the
scenario's timeout; and, unlike Netrix, which waits for the timeout, as soon as it reaches a
success state it cannot leave (no transitions out): its verdict can no longer change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mallory.scenario.context import Context
from mallory.scenario.dsl import Condition
from mallory.scenario.events import ScenarioError, ScenarioEvent

START = "startState"
FAIL = "failState"
SUCCESS = "successState"


@dataclass
class State:
    label: str
    success: bool = False
    transitions: list[tuple[Condition, str]] = field(default_factory=list)


class Builder:
    """Adds transitions from the state it stands at (Netrix's StateMachineBuilder)."""

    def __init__(self, machine: StateMachine, state: State) -> None:
        self._machine = machine
        self._state = state

    def on(self, condition: Condition, target: str) -> Builder:
        """A transition to `target` (made on first mention) when `condition` holds; the
        builder of `target`."""
        if not isinstance(condition, Condition):
            raise ScenarioError(f"state {self._state.label!r}: on() takes a condition, not {condition!r}")
        if not isinstance(target, str) or not target:
            raise ScenarioError(f"state {self._state.label!r}: a transition's target is a state's label, not {target!r}")
        if self._state.label == FAIL:
            raise ScenarioError(f"{FAIL} is final: a run ends there")
        self._state.transitions.append((condition, target))
        return Builder(self._machine, self._machine.state(target, create=True))

    def mark_success(self) -> Builder:
        """Makes the builder's state a success state."""
        if self._state.label == FAIL:
            raise ScenarioError(f"{FAIL} cannot be a success state")
        self._state.success = True
        return self


class StateMachine:
    """States and their transitions (see the module docstring): a definition, which any
    number of runs (`Run`) step through."""

    def __init__(self) -> None:
        self.states: dict[str, State] = {START: State(START), FAIL: State(FAIL), SUCCESS: State(SUCCESS, success=True)}

    def builder(self, state: str = START) -> Builder:
        """A builder at `state` (the start state by default; another must exist already)."""
        return Builder(self, self.state(state))

    def state(self, label: str, create: bool = False) -> State:
        if label not in self.states:
            if not create:
                raise ScenarioError(f"the state machine has no state {label!r}")
            self.states[label] = State(label)
        return self.states[label]

    def reachable(self) -> set[str]:
        """The states some sequence of transitions leads to from START (START included)."""
        seen, todo = {START}, [START]
        while todo:
            for _, target in self.states[todo.pop()].transitions:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen


@dataclass(frozen=True)
class Transition:
    """A transition a run took: on its `index`-th event (from 0), `event`."""

    index: int
    event: ScenarioEvent
    source: str
    target: str
    condition: str


class Run:
    """One run through a machine: its current state (also the context's `state`, which
    `InState` reads) and the transitions it took."""

    def __init__(self, machine: StateMachine, ctx: Context) -> None:
        self.machine = machine
        self.ctx = ctx
        self.ctx.state = START
        self.path: list[Transition] = []

    @property
    def state(self) -> State:
        return self.machine.states[self.ctx.state]

    @property
    def ended(self) -> bool:
        """At FAIL, or at a success state with no way out: nothing can change the verdict."""
        return self.state.label == FAIL or (self.state.success and not self.state.transitions)

    def step(self, index: int, event: ScenarioEvent) -> Transition | None:
        """The transition `event` takes from the current state, taken; None if none."""
        current = self.state
        for condition, target in current.transitions:
            if condition(event, self.ctx):
                taken = Transition(index, event, current.label, target, str(condition))
                self.path.append(taken)
                self.ctx.state = target
                return taken
        return None
