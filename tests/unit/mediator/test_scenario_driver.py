"""A scenario's engine driven by the gateway (mallory/mediator/scenario_driver.py): the
proxy's outcomes for each message, held sets released by code events from the timeline,
delays, duplicates, what a scenario sees of the timeline, and the report."""

from __future__ import annotations

from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.mediator.proxy import Delivery, Outcome
from mallory.mediator.scenario_driver import ScenarioDriver
from mallory.scenario import (
    SUCCESS,
    CreatePartition,
    Delay,
    Deliver,
    DeliverAllFromSet,
    Drop,
    If,
    IsEventType,
    IsMessageReceive,
    IsMessageSend,
    IsMessageType,
    Set,
    StateMachine,
    StoreInSet,
)
from mallory.scenario.engine import Scenario
from mallory.scenario.events import Message
from mallory.scenario.filters import FilterSet
from mallory.timeline.builder import Committed
from mallory.timeline.event import Event, Kind

NODES = ["n1", "n2", "n3"]
CATALOGUE = Catalogue([CodeEvent(7, "sut.c", 10, "become_leader", "FUNC", "became-leader")])


def driver(filters, machine=None, duplicates=False) -> ScenarioDriver:
    if machine is None:
        machine = StateMachine()
        machine.builder().on(IsEventType("never"), SUCCESS)
    return ScenarioDriver(Scenario("t", FilterSet(filters), machine, (), 5.0, duplicates), NODES, CATALOGUE)


def msg(i: int, type: str = "append", src: str = "n1", dst: str = "n2") -> Message:
    return Message(f"m{i}", src, dst, type)


def entry(event: Event) -> Committed:
    return Committed(event, 0, 0, 0, None)


def test_an_unmatched_message_is_delivered_then_let_go():
    d = driver([])
    assert d.on_message(msg(1)) == Outcome((Delivery("m1"),))
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))  # delivered and in no set: let go
    assert d.report()["messages"] == {"n1->n2": {"append": {"sent": 1, "delivered": 1}}}


def test_a_message_no_filter_delivers_is_dropped_and_let_go_at_once_unless_a_set_holds_it():
    d = driver([If(IsMessageType("vote")).Then(StoreInSet(Set("votes"))), If(IsMessageType("append")).Then(Drop())])
    assert d.on_message(msg(1)) == Outcome((), ("m1",))
    assert d.on_message(msg(2, "vote")) == Outcome()  # held: kept for a release
    assert d.report()["messages"] == {"n1->n2": {"append": {"sent": 1, "dropped": 1}, "vote": {"sent": 1, "held": 1}}}


def test_a_held_set_is_released_by_a_code_event_from_the_timeline():
    d = driver([If(IsMessageSend() & IsMessageType("append")).Then(StoreInSet(Set("held"))),
                If(IsEventType("became-leader")).Then(DeliverAllFromSet(Set("held")))])
    released = []
    d.release = released.append
    assert d.on_message(msg(1)) == Outcome() and d.on_message(msg(2)) == Outcome()
    d.on_entries([entry(Event("n1", Kind.FUNC, 5, 999)),  # not in the catalogue: no scenario event
                  entry(Event("n1", Kind.SEND, 5, 1, "append")),  # packets are not a scenario's
                  entry(Event("n3", Kind.FUNC, 6, 7))])
    assert released == [Outcome((Delivery("m1"), Delivery("m2")))]
    assert d.engine.events == 3 and d.report()["messages"]["n1->n2"]["append"] == {"sent": 2, "held": 2}
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))


def test_a_message_the_proxy_lost_is_forgotten_whatever_was_ordered_for_it():
    """Its connection closed before its delivery: the driver keeps nothing of it (else an
    entry per message lost with a connection, for the mediator's life). Still held in a
    set, it may be released later: then it is ordered, lost again, forgotten again."""
    d = driver([If(IsMessageType("vote")).Then(StoreInSet(Set("votes"))),
                If(IsEventType("became-leader")).Then(DeliverAllFromSet(Set("votes")))])
    d.release = lambda outcome: None
    assert d.on_message(msg(1)) == Outcome((Delivery("m1"),))
    assert d.on_message(msg(2, "vote")) == Outcome()
    d.on_lost("m1")
    d.on_lost("m2")
    assert not d._outstanding and not d._sent and d._in_a_set("m2")
    d.on_entries([entry(Event("n3", Kind.FUNC, 6, 7))])
    d.on_lost("m2")
    assert not d._outstanding and not d._sent and not d._delivered


def test_a_delay_is_a_later_delivery_and_counted():
    d = driver([If(IsMessageType("append")).Then(Delay(20))])
    assert d.on_message(msg(1)) == Outcome((Delivery("m1", 20_000_000),))
    assert d.report()["messages"]["n1->n2"]["append"] == {"sent": 1, "delayed": 1}


def test_a_second_delivery_is_left_out_unless_the_scenario_allows_duplicates():
    """Without duplicates the message let out of its set is not delivered again, and as it
    is in no set any more it is let go (else the proxy kept its bytes, and the driver its
    id, for the connection's life)."""
    filters = [If(IsMessageSend() & IsMessageType("append")).Then(Deliver(), StoreInSet(Set("again"))),
               If(IsEventType("became-leader")).Then(DeliverAllFromSet(Set("again")))]
    for allowed, expected in ((False, [Outcome((), ("m1",))]), (True, [Outcome((Delivery("m1"),))])):
        d = driver(filters, duplicates=allowed)
        released = []
        d.release = released.append
        assert d.on_message(msg(1)) == Outcome((Delivery("m1"),))
        assert d.on_delivered(msg(1)) == Outcome()  # still in a set: kept
        d.on_entries([entry(Event("n1", Kind.FUNC, 5, 7))])
        assert released == expected
        assert bool(d._delivered) == allowed  # the duplicate is still to be heard of


def test_a_message_named_by_two_sets_released_at_once_is_delivered_once():
    filters = [If(IsMessageSend()).Then(StoreInSet(Set("a")), StoreInSet(Set("b"))),
               If(IsEventType("became-leader")).Then(DeliverAllFromSet(Set("a")), DeliverAllFromSet(Set("b")))]
    d = driver(filters)
    released = []
    d.release = released.append
    assert d.on_message(msg(1)) == Outcome()
    d.on_entries([entry(Event("n1", Kind.FUNC, 5, 7))])
    assert released == [Outcome((Delivery("m1"),))]
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))


def test_the_run_ends_then_everything_passes_and_the_report_says_how_it_went():
    machine = StateMachine()
    machine.builder().on(IsMessageType("vote"), SUCCESS)
    d = driver([If(IsMessageType("append")).Then(Drop())], machine)
    d.on_message(msg(1))
    d.on_message(msg(2, "vote", "n2", "n1"))
    assert d.engine.ended
    # after the end messages pass, and are not the run's: uncounted
    assert d.on_message(msg(3)) == Outcome((Delivery("m3"),))
    d.on_delivered(msg(3))
    report = d.report()
    assert report["ended"] and report["passed"] and report["state"] == SUCCESS
    assert report["lines"][1] == "path: startState -> successState"
    assert report["messages"]["n1->n2"]["append"] == {"sent": 1, "dropped": 1}


def test_what_the_run_held_is_delivered_when_it_ends_and_counted_released():
    """After the end the SUT runs on undisturbed: a message still held in a set would be
    a drop the scenario never asked for (and its bytes kept for the connection's life)."""
    machine = StateMachine()
    machine.builder().on(IsMessageType("vote"), SUCCESS)
    d = driver([If(IsMessageType("append")).Then(StoreInSet(Set("held")))], machine)
    assert d.on_message(msg(1)) == Outcome()
    assert d.on_message(msg(2, "vote")) == Outcome((Delivery("m2"), Delivery("m1")))  # the vote ends the run
    assert d.engine.ended and not d._in_a_set("m1")
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))
    assert d.report()["messages"]["n1->n2"] == {"append": {"sent": 1, "held": 1, "released": 1},
                                                "vote": {"sent": 1}}


def test_a_run_ended_by_a_timeline_event_releases_what_it_held_through_the_proxy():
    machine = StateMachine()
    machine.builder().on(IsEventType("became-leader"), SUCCESS)
    d = driver([If(IsMessageType("append")).Then(StoreInSet(Set("held")))], machine)
    released = []
    d.release = released.append
    d.on_message(msg(1))
    d.on_entries([entry(Event("n3", Kind.FUNC, 6, 7))])
    assert d.engine.ended and released == [Outcome((Delivery("m1"),))]


def test_a_timeline_event_the_scenario_fails_on_is_counted_and_the_ingest_goes_on():
    """on_entries runs in the ingest (an observer's connection, the mediator's own ticker):
    a scenario's error escaping it would reject an observer's good batch, or end the
    ticker thread and with it the mediator's own events. Counted like a refused event, and
    the events after it are still stepped."""
    d = driver([If(IsEventType("became-leader")).Then(CreatePartition(one=["n1"], two=1)),  # 2 of 3 nodes
                If(IsMessageSend() & IsMessageType("append")).Then(StoreInSet(Set("held"))),
                If(IsEventType("truncate")).Then(DeliverAllFromSet(Set("held")))])
    released = []
    d.release = released.append
    d.on_message(msg(1))
    d.on_entries([entry(Event("n3", Kind.FUNC, 6, 7)), entry(Event("n2", Kind.LOG, 7, 5, "truncate"))])
    assert d.report()["refused_events"] == 1 and released == [Outcome((Delivery("m1"),))]


def test_a_message_the_scenario_fails_on_is_delivered_counted_and_let_go():
    """An action that raises on a message's SEND or RECV: the message goes on as if no
    filter had handled it, the error is the scenario's (refused_events), and the driver
    still lets the message go (else its id and bytes stayed for the connection's life)."""
    bad = CreatePartition(one=["n1"], two=1)  # 2 of the 3 nodes: raises
    d = driver([If(IsMessageReceive()).Then(bad), If(IsMessageSend() & IsMessageType("vote")).Then(bad)])
    assert d.on_message(msg(1)) == Outcome((Delivery("m1"),))
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))
    assert d.on_message(msg(2, "vote")) == Outcome((Delivery("m2"),))
    assert d.report()["refused_events"] == 2 and not d._delivered and d._outstanding == {"m2": 1}


def test_what_a_scenario_sees_of_the_timeline():
    d = driver([])
    seen = d.scenario_event
    assert str(seen(Event("n2", Kind.LOG, 1, 5, "truncate"))) == "n2 LOG truncate"
    assert str(seen(Event("mediator", Kind.CLIENT_COMPLETE, 1, 3, "write:ok"))) == "- CLIENT_COMPLETE write:ok"
    assert str(seen(Event("mediator", Kind.FAULT, 1, 0, "partition:one"))) == "- FAULT partition:one"
    assert str(seen(Event("n1", Kind.BLOCK, 1, 7))) == "n1 BLOCK became-leader"
    assert seen(Event("mediator", Kind.CLIENT_INVOKE, 1, 3, "write:weird")) is None
    assert seen(Event("n9", Kind.LOG, 1, 5, "x")) is None and seen(Event("n1", Kind.RECV, 1, 5, "append")) is None
