"""Filter sets as campaign faults, on the gateway: the message layer's decider when the
mediator runs with `--filter-sets FILE` (issue 19, part 3; the fault family that switches
them is nemesis/faults/filters.py).

The file names filter sets (mallory/harness/scenario_file.py `load_filter_sets`). At most one
is in force at a time, switched over the API (POST /filters, mallory/mediator/api.py): while
none is, every message is delivered at once, uncounted; while one is, each message goes
through its filters exactly as a scenario's do (mallory/mediator/scenario_driver.py, whose
bookkeeping this shares), with a fresh context per activation (counters, message sets, once
flags and partition start empty; its roles bound to the nodes the request names) and no
state machine (`InState` sees the start state throughout). Switching ends the set in force:
what its filters still held in message sets is delivered then (the fault is over, and what
it held back arrives late, as after a delay; counted `released`), and its account, per link
and message type what became of the messages while it was in force, is returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mallory.instrument.catalogue import Catalogue
from mallory.mediator.scenario_driver import MessageDriver
from mallory.scenario.engine import Engine
from mallory.scenario.events import ScenarioError
from mallory.scenario.filters import FilterSet
from mallory.scenario.machine import StateMachine
from mallory.scenario.roles import ROLES, roles_named

#: the machine of a filter set in force: no transitions, so its run never ends
_NO_MACHINE = StateMachine()


class FilterSetDriver(MessageDriver):
    """The named filter sets `sets` of a cluster of `nodes`, one of them in force at a time
    (see the module docstring)."""

    def __init__(self, sets: Mapping[str, FilterSet], nodes: Sequence[str], catalogue: Catalogue | None = None,
                 own_node: str = "mediator") -> None:
        super().__init__(nodes, catalogue, own_node)
        self.sets = dict(sets)
        self.order = sorted(nodes)
        self.active: str | None = None
        self.roles: dict[str, str] = {}
        self.activations = 0

    def switch(self, name: str | None, roles: Mapping[str, str]) -> dict[str, Any]:
        """Put the set `name` in force with `roles` bound (role -> node), or none (None,
        `roles` empty); the set that was in force ends. ScenarioError, with nothing changed,
        for an unknown set, a role that is none of ROLES or that the set does not name, or a
        node that is not one of the cluster's. The answer: the set now in force and its
        roles, and `ended`, the ended activation's account (None when none was in force)."""
        engine = None
        if name is not None:
            if name not in self.sets:
                raise ScenarioError(f"no filter set {name!r} (sets: {', '.join(sorted(self.sets)) or 'none'})")
            named = roles_named(self.sets[name].filters)
            if unknown := sorted(set(roles) - set(ROLES)):
                raise ScenarioError(f"unknown role {unknown[0]!r} (roles: {', '.join(ROLES)})")
            if unused := sorted(set(roles) - named):
                raise ScenarioError(f"filter set {name!r} names no role {unused[0]!r} "
                                    f"(it names {', '.join(sorted(named)) or 'none'})")
            engine = Engine(self.sets[name], _NO_MACHINE, self.order, roles)  # checks the nodes
        elif roles:
            raise ScenarioError("no filter set in force binds no roles")
        with self._lock:
            held = self._release_held()
            ended = self._account() if self.engine is not None else None
            if ended is not None:
                ended["released"] = len(held.deliver)
            self.engine = engine
            self.active = name
            self.roles = dict(roles) if name is not None else {}
            self.counts = {}
            self._sent = set()
            self.activations += name is not None
            answer = {**self.state(), "ended": ended}  # now: another switch may follow at once
        if (held.deliver or held.forget) and self.release is not None:
            self.release(held)
        return answer

    def state(self) -> dict[str, Any]:
        """The set in force (None: none) and its roles (read under the lock for an answer
        that must match the account: `switch`, `report`)."""
        return {"active": self.active, "roles": dict(self.roles)}

    def report(self) -> dict[str, Any]:
        """The sets, the one in force and its account so far, activations since the start."""
        with self._lock:
            current = self._account() if self.engine is not None else None
            return {"sets": {name: sorted(roles_named(s.filters)) for name, s in sorted(self.sets.items())},
                    **self.state(), "current": current, "activations": self.activations,
                    "refused_events": self.errors}

    def _account(self) -> dict[str, Any]:
        """The activation in force: its set, roles, events decided and messages."""
        assert self.engine is not None
        return {"set": self.active, "roles": dict(self.roles), "events": self.engine.events,
                "messages": self._messages()}
