"""Filter sets as campaign faults on the gateway (mallory/mediator/filter_sets.py): nothing
disturbed or counted while none is in force, a set's filters with its roles bound while one
is, what a switch releases and reports, refused switches that change nothing; and the
/filters routes of the API (mallory/mediator/api.py) on a real server, the message layer
built but not started (no root)."""

from __future__ import annotations

import http.client

import orjson
import pytest

from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.mediator.filter_sets import FilterSetDriver
from mallory.mediator.message_layer import LayerConfig
from mallory.mediator.proxy import Delivery, Outcome
from mallory.mediator.service import Mediator
from mallory.observer.messages import MessageFormat, PeerMessages, TypeField
from mallory.scenario import (
    Count,
    Deliver,
    DeliverAllFromSet,
    Drop,
    If,
    IsEventType,
    IsMessageTo,
    IsMessageType,
    Set,
    StoreInSet,
    role,
)
from mallory.scenario.events import Message, ScenarioError
from mallory.scenario.filters import FilterSet
from mallory.timeline.builder import Committed
from mallory.timeline.event import Event, Kind

NODES = ["n1", "n2", "n3"]
SETS = {
    "drop-appends-to-a-follower": FilterSet([If(IsMessageType("append") & IsMessageTo(role("follower"))).Then(Drop())]),
    "hold-votes": FilterSet([If(IsMessageType("vote") & Count("held").lt(2)).Then(StoreInSet(Set("votes")),
                                                                                 Count("held").incr())]),
}


def msg(i: int, type: str = "append", src: str = "n1", dst: str = "n2") -> Message:
    return Message(f"m{i}", src, dst, type)


class Released:
    """Stands in for the proxy's `deliver`: the outcomes released off the proxy's thread."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def __call__(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def driver() -> tuple[FilterSetDriver, Released]:
    d = FilterSetDriver(SETS, NODES)
    d.release = released = Released()
    return d, released


def test_with_no_set_in_force_every_message_is_delivered_uncounted_and_let_go():
    d, _ = driver()
    assert d.on_message(msg(1)) == Outcome((Delivery("m1"),))
    assert d.on_delivered(msg(1)) == Outcome((), ("m1",))
    assert d.report()["current"] is None and d.counts == {} and not d._delivered and not d._outstanding


def test_a_set_in_force_decides_with_its_roles_bound_and_its_account_ends_with_it():
    d, _ = driver()
    answer = d.switch("drop-appends-to-a-follower", {"follower": "n2"})
    assert answer == {"active": "drop-appends-to-a-follower", "roles": {"follower": "n2"}, "ended": None}
    assert d.on_message(msg(1)) == Outcome((), ("m1",))  # an append to n2: dropped
    assert d.on_message(msg(2, dst="n3")) == Outcome((Delivery("m2"),))
    assert d.on_message(msg(3, "vote")) == Outcome((Delivery("m3"),))
    ended = d.switch(None, {})["ended"]
    assert ended["set"] == "drop-appends-to-a-follower" and ended["roles"] == {"follower": "n2"}
    assert ended["messages"] == {"n1->n2": {"append": {"sent": 1, "dropped": 1}, "vote": {"sent": 1}},
                                 "n1->n3": {"append": {"sent": 1}}}
    assert ended["events"] == 3 and ended["released"] == 0
    assert d.on_message(msg(4)) == Outcome((Delivery("m4"),))  # out of force: delivered again
    assert d.report()["activations"] == 1


def test_what_a_set_held_is_delivered_when_it_goes_out_of_force_and_then_let_go():
    d, released = driver()
    d.switch("hold-votes", {})
    assert d.on_message(msg(1, "vote")) == Outcome()  # held in the set
    assert d.on_message(msg(2, "vote")) == Outcome()
    assert d.on_message(msg(3, "vote")) == Outcome((Delivery("m3"),))  # the counter is at 2
    ended = d.switch("drop-appends-to-a-follower", {"follower": "n3"})["ended"]  # a switch ends it too
    assert ended["released"] == 2 and ended["messages"]["n1->n2"]["vote"] == {"sent": 3, "held": 2, "released": 2}
    assert released.outcomes == [Outcome((Delivery("m1"), Delivery("m2")))]
    assert d.on_delivered(msg(1, "vote")) == Outcome((), ("m1",))  # in no set any more: let go


def test_an_activation_counts_the_deliveries_of_its_own_messages_only():
    """What the set before held is released at the switch and delivered while the next is
    in force: the next one's account must not say it delivered messages it never saw."""
    d, released = driver()
    d.switch("hold-votes", {})
    assert d.on_message(msg(1, "vote")) == Outcome()
    d.switch("drop-appends-to-a-follower", {"follower": "n3"})
    assert released.outcomes == [Outcome((Delivery("m1"),))]
    assert d.on_delivered(msg(1, "vote")) == Outcome((), ("m1",))
    assert d.on_message(msg(2, "vote")) == Outcome((Delivery("m2"),))
    d.on_delivered(msg(2, "vote"))
    assert d.switch(None, {})["ended"]["messages"] == {"n1->n2": {"vote": {"sent": 1, "delivered": 1}}}


def test_a_set_sees_the_receipt_of_the_messages_it_saw_sent_only():
    """A message sent before the set went into force and delivered after: its RECV is no
    event of this set's (a filter counting receipts would count one it never saw sent)."""
    d, _ = driver()
    assert d.on_message(msg(1, "vote")) == Outcome((Delivery("m1"),))
    d.switch("hold-votes", {})
    assert d.on_delivered(msg(1, "vote")) == Outcome((), ("m1",))
    assert d.report()["current"]["events"] == 0


def test_a_message_a_set_delivered_and_held_is_let_go_when_the_set_goes_out_of_force():
    """Delivered once already (no duplicates): not delivered again, but let go, or the
    proxy kept its bytes for the connection's life."""
    d = FilterSetDriver({"deliver-and-keep": FilterSet([If(IsMessageType("vote")).Then(
        Deliver(), StoreInSet(Set("votes")))])}, NODES)
    d.release = released = Released()
    d.switch("deliver-and-keep", {})
    assert d.on_message(msg(1, "vote")) == Outcome((Delivery("m1"),))
    assert d.on_delivered(msg(1, "vote")) == Outcome()  # still in the set: kept
    assert d.switch(None, {})["ended"]["released"] == 0
    assert released.outcomes == [Outcome((), ("m1",))]
    assert not d._delivered and not d._outstanding


def test_timeline_events_reach_the_set_in_force_only():
    """A set's filters see code events too (a held set released on one); with none in
    force the ingest's events are not even looked at."""
    sets = {"hold-until-leader": FilterSet([
        If(IsMessageType("vote")).Then(StoreInSet(Set("votes"))),
        If(IsEventType("became-leader")).Then(DeliverAllFromSet(Set("votes")))])}
    catalogue = Catalogue([CodeEvent(7, "sut.c", 10, "become_leader", "FUNC", "became-leader")])
    d = FilterSetDriver(sets, NODES, catalogue)
    d.release = released = Released()
    became_leader = Committed(Event("n2", Kind.FUNC, 5, 7, ""), 0, 0, 0, None)
    d.scenario_event = lambda event: pytest.fail("looked at with no set in force")
    d.on_entries([became_leader])
    del d.scenario_event
    d.switch("hold-until-leader", {})
    assert d.on_message(msg(1, "vote")) == Outcome()
    d.on_entries([became_leader])
    assert released.outcomes == [Outcome((Delivery("m1"),))]


def test_a_switch_answers_with_the_state_it_made_though_another_switch_follows_at_once():
    """The API serves each request in a thread of its own: a second switch may run while
    the first releases what its set held (outside the lock); the first's answer is still
    the state it made, not the second's."""
    d, _ = driver()
    d.switch("hold-votes", {})
    d.on_message(msg(1, "vote"))
    d.release = lambda outcome: d.switch("drop-appends-to-a-follower", {"follower": "n2"})  # the other thread
    answer = d.switch(None, {})
    assert answer["active"] is None and answer["roles"] == {} and answer["ended"]["set"] == "hold-votes"
    assert d.state()["active"] == "drop-appends-to-a-follower"


@pytest.mark.parametrize("name, roles, error", [
    ("no-such-set", {}, "no filter set 'no-such-set' \\(sets: drop-appends-to-a-follower, hold-votes\\)"),
    ("drop-appends-to-a-follower", {"boss": "n1"}, "unknown role 'boss'"),
    ("drop-appends-to-a-follower", {"leader": "n1"}, "names no role 'leader' \\(it names follower\\)"),
    ("drop-appends-to-a-follower", {"follower": "n9"}, "n9, not a node of this run"),
    (None, {"follower": "n2"}, "no filter set in force binds no roles"),
])
def test_a_refused_switch_changes_nothing(name, roles, error):
    d, _ = driver()
    d.switch("hold-votes", {})
    d.on_message(msg(1, "vote"))
    with pytest.raises(ScenarioError, match=error):
        d.switch(name, roles)
    assert d.state() == {"active": "hold-votes", "roles": {}} and d._in_a_set("m1")


# -- the API -----------------------------------------------------------------------------

ADDRESSES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}
TOKEN = "s3cret"
DECLARED = PeerMessages(MessageFormat(delimiter=b"\n", type=TypeField(names={65: "append"})), (7001,))


@pytest.fixture
def mediator(tmp_path):
    """A mediator with filter sets whose API serves; its message layer is built, not started."""
    layer = LayerConfig(DECLARED, Catalogue(), capture_queue=1, filter_sets=SETS)
    m = Mediator(ADDRESSES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0), layer=layer)
    m.api.start()
    yield m
    m.api.stop()
    m.receiver.close()


def call(m, method: str, path: str, body: object = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*m.api.server_address[:2], timeout=5)
    conn.request(method, path, body=None if body is None else orjson.dumps(body), headers={"X-Mallory-Token": TOKEN})
    resp = conn.getresponse()
    payload = orjson.loads(resp.read())
    conn.close()
    return resp.status, payload


def test_the_api_switches_filter_sets_and_each_switch_is_a_fault_event(mediator):
    status, out = call(mediator, "GET", "/filters")
    assert status == 200 and out["sets"] == {"drop-appends-to-a-follower": ["follower"], "hold-votes": []}
    assert out["active"] is None
    status, out = call(mediator, "POST", "/filters", {"set": "drop-appends-to-a-follower", "roles": {"follower": "n3"}})
    assert status == 200 and out == {"active": "drop-appends-to-a-follower", "roles": {"follower": "n3"}, "ended": None}
    assert call(mediator, "GET", "/filters")[1]["current"]["roles"] == {"follower": "n3"}
    status, out = call(mediator, "POST", "/filters", {"set": None})
    assert status == 200 and out["active"] is None and out["ended"]["set"] == "drop-appends-to-a-follower"
    faults = [e.data for e in mediator._own if e.kind is Kind.FAULT]
    assert faults == ["filters:drop-appends-to-a-follower", "filters-off"]
    assert call(mediator, "GET", "/scenario")[0] == 409  # filter sets are no scenario


@pytest.mark.parametrize("body, status, reason", [
    ({}, 400, "missing field 'set'"),
    ({"set": 3}, 400, "'set' must be a filter set's name"),
    ({"set": ""}, 400, "'set' must be a filter set's name"),
    ({"set": "hold-votes", "roles": ["leader"]}, 400, "'roles' must be an object from role names to node names"),
    ({"set": "hold-votes", "roles": {"leader": 1}}, 400, "'roles' must be an object"),
    ({"set": "hold-votes", "until": 3}, 400, "unknown field 'until'"),
    ({"set": "nope"}, 422, "no filter set 'nope'"),
    ({"set": "drop-appends-to-a-follower", "roles": {"follower": "n7"}}, 422, "not a node of this run"),
])
def test_a_bad_switch_gets_a_4xx_with_its_reason_and_changes_nothing(mediator, body, status, reason):
    call(mediator, "POST", "/filters", {"set": "hold-votes"})
    got, out = call(mediator, "POST", "/filters", body)
    assert got == status and reason in out["error"]
    assert call(mediator, "GET", "/filters")[1]["active"] == "hold-votes"
    assert [e.data for e in mediator._own if e.kind is Kind.FAULT] == ["filters:hold-votes"]


def test_a_mediator_without_filter_sets_answers_409(tmp_path):
    m = Mediator(ADDRESSES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0))
    m.api.start()
    try:
        for method, body in (("GET", None), ("POST", {"set": None})):
            status, out = call(m, method, "/filters", body)
            assert status == 409 and "start it with --filter-sets" in out["error"]
    finally:
        m.api.stop()
        m.receiver.close()
