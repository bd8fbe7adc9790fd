"""Filters and the filter set (mallory/scenario/filters.py) against Netrix's testlib
(filters.go: first match, the default delivers an unmatched send; actions.go: If/Then
delivers what its actions give, in order, and nothing else; parition.go: IsolateNode)."""

from __future__ import annotations

import pytest

from mallory.scenario import (
    Count,
    Delay,
    Deliver,
    DeliverAllFromSet,
    Drop,
    If,
    IsEventType,
    IsMessageSend,
    IsMessageTo,
    IsMessageType,
    IsolateNode,
    Set,
    StoreInSet,
)
from mallory.scenario.context import Context
from mallory.scenario.events import Message, ScenarioError, code, receive, send
from mallory.scenario.filters import Decision, FilterSet

NODES = ("n1", "n2", "n3")


def msg(i: int, src: str = "n1", dst: str = "n2", type: str = "append") -> Message:
    return Message(str(i), src, dst, type)


def ctx() -> Context:
    return Context(NODES, "startState")


def test_the_issues_filter_delivers_the_first_three_appends_to_n2_and_drops_the_rest():
    seen = Count("seen")
    filters = FilterSet([If(IsMessageType("append") & IsMessageTo("n2") & seen.lt(3)).Then(Deliver(), seen.incr()),
                         If(IsMessageType("append") & IsMessageTo("n2")).Then(Drop())])
    c = ctx()
    decisions = [filters.decide(send(msg(i)), c) for i in range(5)]
    assert [d.deliver for d in decisions] == [(msg(0),), (msg(1),), (msg(2),), (), ()]
    assert [d.filter for d in decisions] == [0, 0, 0, 1, 1]
    assert c.counters == {"seen": 3}
    # another receiver matches neither filter: the default delivers it
    assert filters.decide(send(msg(9, dst="n3")), c) == Decision((msg(9, dst="n3"),), None)


def test_the_first_filter_that_holds_decides_and_later_ones_are_not_run():
    counted = Count("later")
    filters = FilterSet([If(IsMessageSend()).Then(Deliver()), If(IsMessageSend()).Then(counted.incr())])
    c = ctx()
    assert filters.decide(send(msg(1)), c) == Decision((msg(1),), 0)
    assert c.counters == {}  # the second filter's action never ran


def test_a_filter_that_holds_without_deliver_drops_the_message():
    filters = FilterSet([If(IsMessageType("append")).Then(Count("n").incr())])
    c = ctx()
    assert filters.decide(send(msg(1)), c) == Decision((), 0)
    assert c.counters == {"n": 1}


def test_without_filters_every_send_is_delivered_and_nothing_else_is():
    filters = FilterSet([])
    c = ctx()
    assert filters.decide(send(msg(1)), c) == Decision((msg(1),), None)
    assert filters.decide(receive(msg(1)), c) == Decision((), None)
    assert filters.decide(code("n1", "commit"), c) == Decision((), None)


def test_another_default_filter_decides_what_no_filter_handles():
    filters = FilterSet([If(IsMessageTo("n3")).Then(Deliver())], default=If(IsMessageSend()).Then(Drop()))
    c = ctx()
    assert filters.decide(send(msg(1)), c) == Decision((), None)
    assert filters.decide(send(msg(2, dst="n3")), c) == Decision((msg(2, dst="n3"),), 0)


def test_hold_and_release_reorders_messages():
    """Netrix's reordering (raft-testing tests/pct/simple_reorder.go): hold vote replies
    until a leader is elected, then deliver them after the message at hand."""
    held = Set("votes")
    filters = FilterSet([
        If(IsMessageType("vote-reply")).Then(StoreInSet(held)),
        If(IsEventType("became-leader")).Then(DeliverAllFromSet(held)),
    ])
    c = ctx()
    votes = [msg(1, "n2", "n1", "vote-reply"), msg(2, "n3", "n1", "vote-reply")]
    assert [filters.decide(send(v), c).deliver for v in votes] == [(), ()]
    assert filters.decide(send(msg(3)), c).deliver == (msg(3),)  # others pass by
    assert filters.decide(code("n1", "became-leader"), c) == Decision(tuple(votes), 1)
    assert filters.decide(code("n1", "became-leader"), c).deliver == ()


def test_actions_deliver_in_their_order():
    held = Set("h")
    filters = FilterSet([If(IsMessageTo("n3")).Then(StoreInSet(held)),
                         If(IsMessageTo("n2")).Then(Deliver(), DeliverAllFromSet(held))])
    c = ctx()
    filters.decide(send(msg(1, dst="n3")), c)
    assert filters.decide(send(msg(2)), c).deliver == (msg(2), msg(1, dst="n3"))
    filters = FilterSet([If(IsMessageTo("n2")).Then(DeliverAllFromSet(held), Deliver())])
    filters_ctx = ctx()
    StoreInSet(held)(send(msg(1, dst="n3")), filters_ctx)
    assert filters.decide(send(msg(2)), filters_ctx).deliver == (msg(1, dst="n3"), msg(2))


def test_isolate_node_handles_every_message_from_or_to_it_and_delivers_none():
    filters = FilterSet([IsolateNode("n3")])
    c = ctx()
    assert filters.decide(send(msg(1, "n1", "n3")), c) == Decision((), 0)
    assert filters.decide(send(msg(2, "n3", "n2")), c) == Decision((), 0)
    assert filters.decide(send(msg(3, "n1", "n2")), c) == Decision((msg(3, "n1", "n2"),), None)
    assert filters.decide(code("n3", "commit"), c).filter is None  # not a message
    assert str(filters.filters[0]).startswith("If(IsolateNode((IsMessageFrom('n3') | IsMessageTo('n3'))))")


def test_if_then_refuses_what_is_not_a_condition_or_an_action():
    with pytest.raises(ScenarioError, match="If takes a condition"):
        If(True)
    with pytest.raises(ScenarioError, match=r"Then takes actions, not IsMessageSend\(\)"):
        If(IsMessageSend()).Then(Deliver(), IsMessageSend())
    with pytest.raises(ScenarioError, match="not If"):
        FilterSet([If(IsMessageSend())])
    with pytest.raises(ScenarioError, match=r"not Drop\(\)"):
        FilterSet([Drop()])


def test_delay_delivers_a_send_later_and_nothing_now_and_is_bounded():
    filters = FilterSet([If(IsMessageType("append")).Then(Delay(250)), If(IsEventType("commit")).Then(Delay(5))])
    c = ctx()
    assert filters.decide(send(msg(1)), c) == Decision((), 0, ((msg(1), 250_000_000),))
    assert filters.decide(receive(msg(1)), c) == Decision((), 0)  # only a SEND's message is delayed
    assert filters.decide(code("n1", "commit"), c) == Decision((), 1)
    assert c.delayed == []
    for bad in (-1, 60_001, True, "5"):
        with pytest.raises(ScenarioError, match="Delay takes milliseconds"):
            Delay(bad)
