"""Filter sets as faults: a named set of Netrix-style filters (mallory/scenario/) put in force
in the gateway's message layer for one step's window, then taken out (issue 19, part 3).

`mallory fuzz --filter-sets FILE` reads the file's sets (mallory/harness/scenario_file.py
`load_filter_sets`) and starts the mediator with them (`mallory mediator --filter-sets`),
which then relays the SUT's declared peer ports message by message
(mallory/mediator/filter_sets.py). Each set is a fault `filters:<name>` the learner can
choose. Enacting one binds the roles its filters name (mallory/scenario/roles.py: the
leader as the adapter names it now, followers drawn with the step's random draw, so a
replay binds the same ones) and puts it in force over the mediator's API; it is verified
by reading back the set and roles in force. The family's faults last one window
(`lasts_one_window`): the campaign loop heals each once its window is observed, which takes
the set out of force (what it held in message sets is delivered then) and records what it
did to the messages, per link and type. Only one set is in force at a time, so only one
such fault is ever active.

A set naming the leader is refused on an SUT whose adapter cannot tell which node leads
(`HasPrimaries`); when the SUT names no leader at the moment (an election), the role stays
unbound and the filters on it hold for no message, as the evidence says.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries
from mallory.scenario.roles import FOLLOWER, LEADER, SECOND_FOLLOWER
from nemesis.faults.base import FaultContext, FaultReport, check_spec

FAMILY = "filters"


@runtime_checkable
class FilterSwitch(Protocol):
    """The mediator's filter-set calls (mallory/mediator/client.py `MediatorClient`); a
    refused or unanswered call raises MalloryError."""

    def filter_sets(self) -> dict[str, Any]:
        """The sets the mediator has ("sets": name -> roles named), the one in force
        ("active", None for none) and its "roles"."""
        ...

    def switch_filters(self, name: str | None, roles: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Put set `name` in force with `roles` bound, or none; "ended": the account of the
        set that was in force."""
        ...


def bind_roles(named: frozenset[str], nodes: Sequence[str], primaries: Sequence[str],
               rng: random.Random) -> dict[str, str]:
    """A node for each role in `named` that can have one: the leader drawn among the
    `primaries` (none: unbound), each follower drawn among the nodes neither a primary nor
    bound already (any node not bound when no node is a primary)."""
    roles: dict[str, str] = {}
    if LEADER in named and primaries:
        roles[LEADER] = rng.choice(sorted(primaries))
    for name in (FOLLOWER, SECOND_FOLLOWER):
        if name in named:
            free = [n for n in nodes if n not in roles.values() and n not in primaries]
            if free:
                roles[name] = rng.choice(free)
    return roles


class FilterSetFaults:
    """The sets of one file: `sets` maps each name to the roles its filters name."""

    family = FAMILY

    def __init__(self, sets: Mapping[str, frozenset[str]]) -> None:
        self.sets = dict(sets)
        self.specs = tuple(sorted(sets))
        self._served: dict[str, Any] | str | None = None  # the mediator's sets, or why none

    def lasts_one_window(self, report: FaultReport) -> bool:
        return True

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if ctx.mediator is None:
            return "no mediator to filter messages with"
        if not isinstance(ctx.mediator, FilterSwitch):
            return "the mediator cannot switch filter sets"
        served = self._mediator_sets(ctx)
        if isinstance(served, str):
            return served
        if spec not in served:
            return f"the mediator has no filter set {spec!r} (it has {', '.join(sorted(served)) or 'none'})"
        if LEADER in self.sets[spec] and not isinstance(ctx.adapter, HasPrimaries):
            return f"{ctx.adapter.name} cannot tell which node leads, and the set names role('leader')"
        return None

    def _mediator_sets(self, ctx: FaultContext) -> dict[str, Any] | str:
        """The sets the mediator serves, asked once; why there are none, as a reason."""
        if self._served is None:
            try:
                self._served = dict(ctx.mediator.filter_sets()["sets"])
            except MalloryError as exc:
                self._served = f"the mediator runs no filter sets ({exc})"
        return self._served

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        named = self.sets[spec]
        primaries = ctx.adapter.primaries() if isinstance(ctx.adapter, HasPrimaries) else []
        roles = bind_roles(named, ctx.nodes, primaries, rng)
        answer = ctx.mediator.switch_filters(spec, roles)
        in_force = ctx.mediator.filter_sets()
        return FaultReport(
            action=f"{FAMILY}:{spec}",
            family=FAMILY,
            spec=spec,
            nodes=sorted(set(roles.values())),
            params={"roles": roles},
            verified=in_force["active"] == spec and in_force["roles"] == roles,
            evidence={"active": in_force["active"], "roles_in_force": in_force["roles"],
                      "unbound": sorted(named - set(roles)), "primaries": list(primaries),
                      "replaced": answer.get("ended")},
        )

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        answer = ctx.mediator.switch_filters(None)
        ended = answer.get("ended")
        report.heal_evidence = {"active_after": answer.get("active"),
                                "ended": ended if ended is not None and ended.get("set") == report.spec else None}
        report.healed = True

    def clear(self, ctx: FaultContext) -> list[str]:
        """Take whatever set is in force out (a reset's last word); the problems met."""
        if not isinstance(ctx.mediator, FilterSwitch) or isinstance(self._mediator_sets(ctx), str):
            return []
        try:
            if ctx.mediator.filter_sets()["active"] is not None:
                ctx.mediator.switch_filters(None)
        except MalloryError as exc:
            return [str(exc)]
        return []

    def health_problems(self, ctx: FaultContext) -> list[str]:
        """A set still in force."""
        if not isinstance(ctx.mediator, FilterSwitch) or isinstance(self._mediator_sets(ctx), str):
            return []
        try:
            active = ctx.mediator.filter_sets()["active"]
        except MalloryError as exc:
            return [str(exc)]
        return [f"filter set {active} is still in force"] if active is not None else []
