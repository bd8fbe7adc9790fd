"""Roles: nodes a filter names by what they are in the cluster when the filters go into
force, not by name (for filter sets used as campaign faults, issue 19 part 3).

A filter set offered to the learner (mallory/harness/scenario_file.py `load_filter_sets`,
nemesis/faults/filters.py) is written once and enacted many times, on whichever node leads
then; so besides node names ("n2") its filters may name a role, `role("leader")`, wherever a
node goes (`IsMessageTo(role("follower"))`, `IsolateNode(role("leader"))`). Whoever enacts
the set binds each role it names to a node (`Context.roles`); a role left unbound (no
leader during an election) names no node, so the conditions on it are false, as for any
node function that gives none.

    leader            the node the SUT says leads now (only SUTs that can tell: their
                      adapter `HasPrimaries`; one of them, drawn, when several say so)
    follower          a node drawn among the others (any node when none leads)
    second-follower   a node drawn among the rest (neither of the two above)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mallory.scenario.context import Context
from mallory.scenario.events import ScenarioError, ScenarioEvent

LEADER = "leader"
FOLLOWER = "follower"
SECOND_FOLLOWER = "second-follower"
#: the roles a filter may name, in the order they are bound
ROLES = (LEADER, FOLLOWER, SECOND_FOLLOWER)
#: how a role reads in a filter's text (every word renders a node function by its __name__)
_NAMED = re.compile(r"role\('([a-z-]+)'\)")


class _Role:
    """A node function: the node bound to a role in the run's context (None: unbound)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__name__ = f"role({name!r})"

    def __call__(self, event: ScenarioEvent, ctx: Context) -> str | None:
        return ctx.roles.get(self.name)


def role(name: str) -> _Role:
    """The node bound to role `name` (one of ROLES) when the filters went into force."""
    if name not in ROLES:
        raise ScenarioError(f"role {name!r}: roles are {', '.join(ROLES)}")
    return _Role(name)


def roles_named(filters: Iterable[object]) -> frozenset[str]:
    """The roles `filters` name. Read from their text, which names every node argument of
    every condition and action (a role as role('leader')): what a filter holds of its
    arguments is closures, and its text is the one complete account of them."""
    return frozenset(name for f in filters for name in _NAMED.findall(str(f)))
