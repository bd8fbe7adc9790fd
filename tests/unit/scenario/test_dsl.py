"""Each condition and action of mallory/scenario/dsl.py against its Netrix definition
(github.com/netrixframework/netrix at 405f123: sm/condition.go, sm/condition_actions.go,
sm/wrapper.go, testlib/conds.go, testlib/actions.go, testlib/parition.go), which is what the
paper's Tables 1-2 list: what each is true of, what each delivers and changes."""

from __future__ import annotations

import pytest

from mallory.scenario import (
    Condition,
    Count,
    CountTo,
    CreatePartition,
    Deliver,
    DeliverAllFromSet,
    Drop,
    InState,
    IsClientEvent,
    IsEventOf,
    IsEventType,
    IsFaultEvent,
    IsMessageAcrossPartition,
    IsMessageBetween,
    IsMessageFrom,
    IsMessageFromPart,
    IsMessageReceive,
    IsMessageSend,
    IsMessageTo,
    IsMessageType,
    IsMessageWithinPartition,
    Once,
    OnceAction,
    RecordMessageAs,
    Set,
    StoreInSet,
    receiver_of,
    sender_of,
)
from mallory.scenario.context import Context
from mallory.scenario.events import (
    Message,
    ScenarioError,
    client,
    code,
    fault,
    log,
    receive,
    send,
)
from mallory.timeline.event import Kind

NODES = ("n1", "n2", "n3")
A12 = Message("1", "n1", "n2", "append")
V21 = Message("2", "n2", "n1", "vote-request")
A13 = Message("3", "n1", "n3", "append")
#: one event of every kind: a message's send and receipt, code, log, client and fault events
EVENTS = {
    "send": send(A12),
    "recv": receive(A12),
    "func": code("n2", "commit"),
    "block": code("n1", "truncate", Kind.BLOCK),
    "log": log("n3", "lost-quorum"),
    "client": client("write", "ok"),
    "fault": fault("partition:one"),
}


def ctx() -> Context:
    return Context(NODES, "startState")


def holds(condition: Condition, context: Context | None = None) -> set[str]:
    """The events of EVENTS the condition holds for."""
    c = context or ctx()
    return {name for name, event in EVENTS.items() if condition(event, c)}


def test_message_conditions_hold_for_sends_and_receipts_of_the_message_only():
    assert holds(IsMessageSend()) == {"send"}
    assert holds(IsMessageReceive()) == {"recv"}
    assert holds(IsMessageType("append")) == {"send", "recv"}
    assert holds(IsMessageType("vote-request")) == set()
    assert holds(IsMessageFrom("n1")) == {"send", "recv"}
    assert holds(IsMessageFrom("n2")) == set()
    assert holds(IsMessageTo("n2")) == {"send", "recv"}
    assert holds(IsMessageTo("n1")) == set()


def test_is_message_between_holds_either_way_and_for_those_two_only():
    c = ctx()
    assert IsMessageBetween("n1", "n2")(send(A12), c) and IsMessageBetween("n2", "n1")(send(A12), c)
    assert IsMessageBetween("n1", "n2")(send(V21), c)
    assert not IsMessageBetween("n1", "n2")(send(A13), c)
    assert holds(IsMessageBetween("n1", "n2")) == {"send", "recv"}


def test_is_event_of_is_the_node_the_event_happened_at():
    # a send happens at the sender, a receipt at the receiver (Netrix's e.Replica)
    assert holds(IsEventOf("n1")) == {"send", "block"}
    assert holds(IsEventOf("n2")) == {"recv", "func"}


def test_is_event_type_names_code_and_log_events_only():
    assert holds(IsEventType("commit")) == {"func"}
    assert holds(IsEventType("truncate")) == {"block"}
    assert holds(IsEventType("lost-quorum")) == {"log"}
    # neither a message's type nor a client op or a fault is an event type
    assert holds(IsEventType("append")) == holds(IsEventType("partition:one")) == set()


def test_client_and_fault_conditions_match_their_fields_or_any():
    assert holds(IsClientEvent()) == {"client"}
    assert holds(IsClientEvent("write", "ok")) == {"client"}
    assert holds(IsClientEvent("write", "invoke")) == holds(IsClientEvent("read")) == set()
    assert holds(IsFaultEvent()) == holds(IsFaultEvent("partition:one")) == {"fault"}
    assert holds(IsFaultEvent("heal")) == set()


def test_node_arguments_may_be_functions_of_the_run_false_while_they_give_none():
    c = ctx()
    to_leader = IsMessageTo(sender_of("leader"))
    assert not to_leader(send(V21), c)  # nothing recorded yet
    RecordMessageAs("leader")(send(A12), c)
    assert to_leader(send(V21), c) and not to_leader(send(A13), c)
    assert IsEventOf(receiver_of("leader"))(code("n2", "commit"), c)
    assert str(to_leader) == "IsMessageTo(sender_of('leader'))"


def test_connectives_compose_and_short_circuit_as_netrix_and_or_not():
    c = ctx()
    a, b = IsMessageType("append"), IsMessageTo("n3")
    assert (a & b)(send(A13), c) and not (a & b)(send(A12), c)
    assert (a | b)(send(A12), c) and not (IsMessageTo("n3") | IsMessageFrom("n2"))(send(A12), c)
    assert (~b)(send(A12), c) and not (~b)(send(A13), c)
    # the right side of & is not asked when the left is false (nor of | when it is true):
    # a Once on the right keeps its one firing
    once = Once("o", IsMessageSend())
    assert not (IsMessageTo("n3") & once)(send(A12), c)
    assert (IsMessageTo("n2") | once)(send(A12), c)
    assert once(send(A12), c) and not once(send(A12), c)


def test_a_condition_refuses_to_be_a_bool():
    with pytest.raises(TypeError, match="combine conditions with &"):
        bool(IsMessageSend() and IsMessageTo("n2"))


def test_counter_comparisons_start_at_zero_and_follow_incr():
    c = ctx()
    seen = Count("seen")
    checks = {"lt": seen.lt(2), "gt": seen.gt(0), "eq": seen.eq(1), "leq": seen.leq(1), "geq": seen.geq(2)}
    event = send(A12)
    truth = {name: check(event, c) for name, check in checks.items()}
    assert truth == {"lt": True, "gt": False, "eq": False, "leq": True, "geq": False}
    assert seen.incr()(event, c) == [] and c.counters["seen"] == 1
    assert {name: check(event, c) for name, check in checks.items()} == \
        {"lt": True, "gt": True, "eq": True, "leq": True, "geq": False}
    seen.incr()(event, c)
    assert {name: check(event, c) for name, check in checks.items()} == \
        {"lt": False, "gt": True, "eq": False, "leq": False, "geq": True}


def test_counter_compared_with_a_value_function_is_false_without_a_value():
    c = ctx()
    c.counters["n"] = 3
    assert Count("n").gt(lambda e, ctx: ctx.counter("m") + 2)(send(A12), c)
    assert not Count("n").gt(lambda e, ctx: None)(send(A12), c)
    assert not Count("n").lt(lambda e, ctx: None)(send(A12), c)


def test_count_to_keeps_a_counter_per_receiver_and_none_for_other_events():
    c = ctx()
    per = CountTo("appends")
    per.incr()(send(A12), c)
    per.incr()(send(A12), c)
    per.incr()(send(A13), c)
    assert c.counters == {"appends_n2": 2, "appends_n3": 1}
    assert per.eq(2)(send(A12), c) and per.eq(1)(send(A13), c)
    # a non-message event has no such counter: every comparison is false, incr does nothing
    assert not per.geq(0)(code("n1", "commit"), c) and not per.lt(100)(code("n1", "commit"), c)
    per.incr()(code("n1", "commit"), c)
    assert c.counters == {"appends_n2": 2, "appends_n3": 1}


def test_count_with_a_label_function_makes_its_counter():
    c = ctx()
    by_type = Count(lambda e, ctx: e.message.type if e.message else None)
    by_type.incr()(send(A12), c)
    by_type.incr()(send(V21), c)
    by_type.incr()(fault("heal"), c)
    assert c.counters == {"append": 1, "vote-request": 1}


def test_store_in_set_holds_sends_and_receipts_and_contains_knows_them_by_id():
    c = ctx()
    held = Set("held")
    assert StoreInSet(held)(send(A12), c) == []
    assert StoreInSet(held)(receive(A13), c) == []
    StoreInSet(held)(code("n1", "commit"), c)  # no message: nothing stored
    assert list(c.sets["held"]) == ["1", "3"]
    assert held.contains()(send(A12), c) and held.contains()(receive(A13), c)
    assert not held.contains()(send(V21), c) and not held.contains()(code("n1", "commit"), c)
    # an equal message with another id is another message
    assert not held.contains()(send(Message("9", "n1", "n2", "append")), c)
    assert held.count().eq(2)(fault("heal"), c)


def test_deliver_all_from_set_releases_in_arrival_order_and_empties_the_set():
    c = ctx()
    held = Set("held")
    for m in (A13, A12, V21):
        StoreInSet(held)(send(m), c)
    assert DeliverAllFromSet(held)(code("n2", "became-leader"), c) == [A13, A12, V21]
    assert c.sets["held"] == {} and held.count().eq(0)(send(A12), c)
    assert DeliverAllFromSet(held)(send(A12), c) == []
    assert DeliverAllFromSet(Set("never-used"))(send(A12), c) == []


def test_deliver_gives_a_sends_message_only_and_drop_gives_nothing():
    c = ctx()
    assert Deliver()(send(A12), c) == [A12]
    assert [Deliver()(e, c) for name, e in EVENTS.items() if name != "send"] == [[]] * (len(EVENTS) - 1)
    assert Drop()(send(A12), c) == []


def test_record_message_as_keeps_the_latest_message_of_a_label():
    c = ctx()
    RecordMessageAs("m")(send(A12), c)
    RecordMessageAs("m")(code("n1", "commit"), c)  # no message: the record stays
    assert c.recorded == {"m": A12}
    RecordMessageAs("m")(receive(V21), c)
    assert c.recorded == {"m": V21}


def test_once_condition_holds_the_first_time_it_would_and_never_again():
    c = ctx()
    first_append_to_n3 = Once("first", IsMessageTo("n3"))
    assert not first_append_to_n3(send(A12), c)  # not yet true: not used up
    assert first_append_to_n3(send(A13), c)
    assert not first_append_to_n3(send(A13), c)
    # a Once of another name, and a once-action of the same name, have their own flags
    assert Once("second", IsMessageTo("n3"))(send(A13), c)
    assert OnceAction("first", Deliver())(send(A13), c) == [A13]


def test_once_action_runs_its_action_the_first_time_only():
    c = ctx()
    bump = OnceAction("bump", Count("k").incr())
    for _ in range(3):
        bump(send(A12), c)
    assert c.counters == {"k": 1}
    deliver_once = OnceAction("d", Deliver())
    assert deliver_once(send(A12), c) == [A12] and deliver_once(send(A12), c) == []


def test_in_state_reads_the_machines_state_from_the_context():
    c = ctx()
    assert InState("startState")(fault("heal"), c) and not InState("cut")(fault("heal"), c)
    c.state = "cut"
    assert InState("cut")(fault("heal"), c)


def test_partition_conditions_are_false_without_a_partition():
    assert holds(IsMessageAcrossPartition()) == holds(IsMessageWithinPartition()) == set()
    assert holds(IsMessageFromPart("a")) == set()


def test_create_partition_and_the_conditions_on_it():
    c = ctx()
    assert CreatePartition(old=["n1"], rest=2)(fault("heal"), c) == []
    assert c.partition is not None and c.partition.parts == {"old": ("n1",), "rest": ("n2", "n3")}
    n2n3 = Message("4", "n2", "n3", "append")
    assert IsMessageAcrossPartition()(send(A12), c) and not IsMessageAcrossPartition()(send(n2n3), c)
    assert IsMessageWithinPartition()(send(n2n3), c) and not IsMessageWithinPartition()(send(A12), c)
    assert IsMessageFromPart("old")(send(A12), c) and not IsMessageFromPart("old")(send(V21), c)
    assert IsMessageFromPart("rest")(receive(V21), c)
    assert not IsMessageAcrossPartition()(code("n1", "commit"), c)  # no message


def test_sized_parts_take_unnamed_nodes_in_node_order_and_nodes_may_be_recorded_ones():
    c = Context(("n1", "n2", "n3", "n4", "n5"), "startState")
    RecordMessageAs("leader")(send(Message("7", "n4", "n1", "append")), c)
    CreatePartition(a=2, leader=[sender_of("leader")], b=2)(fault("heal"), c)
    assert c.partition.parts == {"a": ("n1", "n2"), "leader": ("n4",), "b": ("n3", "n5")}
    assert str(c.partition) == "a: n1 n2 | leader: n4 | b: n3 n5"


@pytest.mark.parametrize(("parts", "error"), [
    ({"a": ["n1"], "b": 1}, "does not cover"),            # n3 in no part
    ({"a": ["n1"], "b": 3}, "does not cover"),            # more than there are
    ({"a": ["n1", "n9"], "b": 1}, "n9 is not a node"),
    ({"a": ["n1"], "b": ["n1", "n2", "n3"]}, "n1 is in parts"),
    ({"a": [sender_of("nothing")], "b": 2}, "not known yet"),
    ({"a": -1, "b": 4}, "not negative"),
])
def test_a_partition_that_does_not_place_every_node_once_is_refused(parts, error):
    with pytest.raises(ScenarioError, match=error):
        CreatePartition(**parts)(fault("heal"), ctx())


def test_create_partition_refuses_a_part_that_is_neither_nodes_nor_a_size():
    with pytest.raises(ScenarioError, match="part 'a' is a list of nodes or a size"):
        CreatePartition(a="n1")
