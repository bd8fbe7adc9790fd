"""The state machine (mallory/scenario/machine.py) and the engine (engine.py) against
Netrix's sm/sm.go (transitions in the order added, the first that holds taken, one per
event), testlib/testcase.go and execution.go (the machine steps before the filters; the
run ends at failState or the timeout and passes in a success state)."""

from __future__ import annotations

import pytest

from mallory.scenario import (
    FAIL,
    START,
    SUCCESS,
    Count,
    Deliver,
    If,
    InState,
    IsEventType,
    IsMessageSend,
    IsMessageType,
    Once,
    StateMachine,
)
from mallory.scenario.context import Context
from mallory.scenario.engine import Engine
from mallory.scenario.events import Message, ScenarioError, code, fault, send
from mallory.scenario.filters import FilterSet
from mallory.scenario.machine import Run

NODES = ("n1", "n2", "n3")
APPEND = Message("1", "n1", "n2", "append")


def run(machine: StateMachine) -> Run:
    return Run(machine, Context(NODES, START))


def test_a_new_machine_has_start_fail_and_success_states():
    machine = StateMachine()
    assert set(machine.states) == {START, FAIL, SUCCESS}
    assert machine.states[SUCCESS].success and not machine.states[START].success
    assert not machine.states[FAIL].success


def test_transitions_are_tried_in_the_order_added_and_one_is_taken_per_event():
    machine = StateMachine()
    start = machine.builder()
    start.on(IsEventType("commit"), "first")
    start.on(IsEventType("commit"), "second")  # never: the first one holds whenever it does
    machine.builder("first").on(IsEventType("commit"), "third")
    r = run(machine)
    assert r.step(0, fault("heal")) is None and r.ctx.state == START
    taken = r.step(1, code("n1", "commit"))
    assert (taken.source, taken.target, taken.index) == (START, "first", 1)
    assert r.ctx.state == "first"  # not "third": one transition per event
    r.step(2, code("n1", "commit"))
    assert [t.target for t in r.path] == ["first", "third"]


def test_builders_chain_and_mark_success():
    machine = StateMachine()
    machine.builder().on(IsEventType("a"), "s1").on(IsEventType("b"), "s2").mark_success()
    assert machine.states["s2"].success and not machine.states["s1"].success
    assert machine.reachable() == {START, "s1", "s2"}
    with pytest.raises(ScenarioError, match="no state 'nowhere'"):
        machine.builder("nowhere")


def test_the_fail_state_is_final_and_never_a_success():
    machine = StateMachine()
    with pytest.raises(ScenarioError, match="final"):
        machine.builder(FAIL).on(IsEventType("a"), START)
    with pytest.raises(ScenarioError, match="cannot be a success"):
        machine.builder(FAIL).mark_success()
    with pytest.raises(ScenarioError, match="takes a condition"):
        machine.builder().on("a", "b")


def engine(machine: StateMachine, filters: list | None = None) -> Engine:
    return Engine(FilterSet(filters or []), machine, NODES)


def test_reaching_fail_ends_the_run_and_fails_it_with_its_path():
    machine = StateMachine()
    machine.builder().on(IsMessageType("append"), "cut").on(IsEventType("stall-catchup-applied"), FAIL)
    e = engine(machine)
    e.step(fault("heal"))
    e.step(send(APPEND))
    assert not e.ended
    e.step(code("n1", "stall-catchup-applied"))
    assert e.ended
    verdict = e.verdict()
    assert not verdict.passed and verdict.state == FAIL and verdict.reason == "reached failState"
    assert [(t.index, t.target) for t in verdict.path] == [(1, "cut"), (2, FAIL)]
    assert verdict.lines()[:2] == ["FAIL: reached failState", "path: startState -> cut -> failState"]
    assert verdict.lines()[3] == "  event 2: n1 FUNC stall-catchup-applied: cut -> failState on " \
                                 "IsEventType('stall-catchup-applied')"
    with pytest.raises(ScenarioError, match="ended in failState"):
        e.step(fault("heal"))


def test_a_success_state_without_way_out_ends_the_run_passed():
    machine = StateMachine()
    machine.builder().on(IsEventType("truncate"), SUCCESS)
    e = engine(machine)
    e.step(code("n1", "truncate"))
    assert e.ended and e.verdict().passed
    assert e.verdict().reason == "reached successState, a success state with no way out"


def test_at_the_timeout_the_run_passes_only_in_a_success_state():
    machine = StateMachine()
    machine.builder().on(IsEventType("a"), "ok").mark_success().on(IsEventType("b"), "bad")
    e = engine(machine)
    assert e.verdict().passed is False
    assert e.verdict().reason == "timed out in startState (not a success state) after 0 events"
    e.step(code("n1", "a"))
    assert not e.ended  # a success state with a way out: the run goes on to its timeout
    assert e.verdict().passed and e.verdict().reason == "timed out in ok (a success state) after 1 events"
    e.step(code("n1", "b"))
    assert not e.verdict().passed and e.verdict().state == "bad"


def test_the_machine_steps_before_the_filters_which_see_the_new_state():
    machine = StateMachine()
    machine.builder().on(IsMessageType("append"), "cut")
    e = engine(machine, [If(InState("cut") & IsMessageType("append")).Then(Count("dropped").incr())])
    assert e.step(send(APPEND)).deliver == ()  # the event that led to "cut" is dropped already
    assert e.ctx.counters == {"dropped": 1}


def test_filters_still_decide_the_event_that_ends_the_run():
    machine = StateMachine()
    machine.builder().on(IsMessageType("append"), FAIL)
    e = engine(machine)
    assert e.step(send(APPEND)).deliver == (APPEND,)
    assert e.ended


def test_machine_and_filters_share_counters_and_once_flags():
    machine = StateMachine()
    machine.builder().on(Count("sent").geq(2), SUCCESS)
    e = engine(machine, [If(Once("first", IsMessageSend())).Then(Deliver(), Count("sent").incr()),
                         If(IsMessageSend()).Then(Count("sent").incr())])
    decisions = [e.step(send(Message(str(i), "n1", "n2", "append"))) for i in range(3)]
    assert [d.filter for d in decisions] == [0, 1, 1]
    assert [len(d.deliver) for d in decisions] == [1, 0, 0]
    # the counter reached 2 on the second event's filters; the machine saw it on the third
    assert e.verdict().path[0].index == 2 and e.ended


def test_runs_of_one_machine_are_independent():
    machine = StateMachine()
    machine.builder().on(IsEventType("a"), SUCCESS)
    first, second = engine(machine), engine(machine)
    first.step(code("n1", "a"))
    assert first.ended and not second.ended and second.verdict().path == ()
