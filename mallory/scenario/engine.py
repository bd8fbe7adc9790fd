"""A scenario and the engine that runs it on a stream of events, with no I/O.

What drives it: the gateway's message layer (mallory/mediator/scenario_driver.py) holds
every message of the SUT's declared peer ports in flight, cut and named by
mallory/observer/framing.py, and calls `Engine.step(send(message))` once per message, then
delivers exactly the messages the decision lists, in order, and those it delays when their
time comes (a message the decision leaves out is dropped, or held in a set until a later
decision releases it). The other events of the run (receipts, code and log
events, client operations, faults) are stepped as they arrive, so that the state machine
sees them and filters may release held messages on them. Their decisions deliver only held
messages. When `Engine.ended` turns true the driver stops the run (what its sets still
hold is delivered then, and no more events are stepped: `step` refuses them); at the
scenario's timeout it stops it too; either way `Engine.verdict()` says how the run went.

Per event, as Netrix's test driver does (netrix testlib/driver.go, testlib/testcase.go:
the state machine's handler is the filter set's first filter and never handles an event):
the state machine steps first, then the filter set decides, so filters see the state the
event led to (`InState`), and an event that ends the run is still filtered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mallory.scenario.context import Context
from mallory.scenario.events import ScenarioError, ScenarioEvent
from mallory.scenario.filters import Decision, FilterSet
from mallory.scenario.machine import FAIL, START, Run, StateMachine, Transition


@dataclass(frozen=True)
class Verdict:
    """How a run went: `passed` when it ended in a success state; the state it ended in,
    why it ended, and the transitions it took (the path through the machine)."""

    passed: bool
    state: str
    reason: str
    path: tuple[Transition, ...]

    def lines(self) -> list[str]:
        """The verdict, the path in one line, then each transition with its event."""
        states = " -> ".join([START, *(t.target for t in self.path)])
        out = [f"{'PASS' if self.passed else 'FAIL'}: {self.reason}", f"path: {states}"]
        out += [f"  event {t.index}: {t.event}: {t.source} -> {t.target} on {t.condition}" for t in self.path]
        return out


class Engine:
    """One run of a filter set and a state machine over the events of a cluster of `nodes`
    (see the module docstring)."""

    def __init__(self, filters: FilterSet, machine: StateMachine, nodes: Sequence[str],
                 roles: Mapping[str, str] | None = None) -> None:
        self.filters = filters
        self.ctx = Context(nodes, START, roles)
        self.run = Run(machine, self.ctx)
        self.events = 0

    @property
    def ended(self) -> bool:
        return self.run.ended

    def step(self, event: ScenarioEvent) -> Decision:
        """The state machine steps on `event`, then the filters decide it."""
        if self.ended:
            raise ScenarioError(f"the run has ended in {self.run.state.label}: it takes no more events")
        self.run.step(self.events, event)
        self.events += 1
        return self.filters.decide(event, self.ctx)

    def verdict(self) -> Verdict:
        """The verdict now: final once `ended`, else the timeout's (pass in a success state)."""
        state = self.run.state
        if state.label == FAIL:
            reason = f"reached {FAIL}"
        elif self.ended:
            reason = f"reached {state.label}, a success state with no way out"
        else:
            kind = "a success state" if state.success else "not a success state"
            reason = f"timed out in {state.label} ({kind}) after {self.events} events"
        return Verdict(state.success, state.label, reason, tuple(self.run.path))


@dataclass(frozen=True)
class Scenario:
    """A Netrix-style unit test: filters and a state machine, client operations to run when
    the cluster is ready (`setup`, each a map with "f" and "value" as a harness client's
    `invoke` takes it), and how long a run may take (`timeout_s`). `name` says where it
    came from. mallory/harness/scenario_file.py reads one from a file. `duplicates`: the
    SUT's protocol tolerates a message delivered twice, so a decision that lists a message
    more than once (or one delivered and stored, then released) duplicates it; without it
    the gateway delivers a message at most once."""

    name: str
    filters: FilterSet
    machine: StateMachine
    setup: tuple[Mapping[str, Any], ...]
    timeout_s: float
    duplicates: bool = False

    def engine(self, nodes: Sequence[str], roles: Mapping[str, str] | None = None) -> Engine:
        """A fresh run over a cluster of `nodes`, `roles` bound to some of them."""
        return Engine(self.filters, self.machine, nodes, roles)
