"""Roles (mallory/scenario/roles.py): nodes a filter names by role, bound per run."""

from __future__ import annotations

import pytest

from mallory.scenario import (
    CreatePartition,
    Deliver,
    Drop,
    If,
    IsEventOf,
    IsMessageBetween,
    IsMessageFrom,
    IsMessageTo,
    IsMessageType,
    IsolateNode,
    role,
)
from mallory.scenario.context import Context
from mallory.scenario.events import Message, ScenarioError, send
from mallory.scenario.machine import START
from mallory.scenario.roles import ROLES, roles_named

NODES = ["n1", "n2", "n3"]


def test_a_role_names_the_node_bound_to_it_and_no_node_while_unbound():
    to_follower = IsMessageTo(role("follower"))
    event = send(Message("m1", "n1", "n2", "append"))
    assert to_follower(event, Context(NODES, START, {"follower": "n2"}))
    assert not to_follower(event, Context(NODES, START, {"follower": "n3"}))
    assert not to_follower(event, Context(NODES, START))  # unbound: the condition holds for nothing
    assert not (~IsMessageTo(role("leader")) & IsMessageTo("n3"))(event, Context(NODES, START))


def test_only_known_roles_and_only_nodes_of_the_run():
    with pytest.raises(ScenarioError, match="roles are leader, follower, second-follower"):
        role("primary")
    with pytest.raises(ScenarioError, match="n9, not a node of this run"):
        Context(NODES, START, {"leader": "n9"})


@pytest.mark.parametrize("make", [
    lambda r: If(IsMessageTo(r)).Then(Drop()),
    lambda r: If(IsMessageFrom(r) & IsMessageType("append")).Then(Deliver()),
    lambda r: If(IsMessageBetween("n1", r)).Then(Drop()),
    lambda r: If(~IsEventOf(r)).Then(Drop()),
    lambda r: IsolateNode(r),
    lambda r: If(IsMessageType("vote")).Then(CreatePartition(cut=[r], rest=2)),
])
def test_every_word_that_takes_a_node_shows_the_roles_it_names(make):
    """roles_named reads the filters' text: each word must render its node argument."""
    for name in ROLES:
        assert roles_named([make(role(name))]) == {name}
    assert roles_named([make("n2")]) == frozenset()
