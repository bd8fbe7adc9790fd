"""The event model a scenario sees (mallory/scenario/events.py): what each constructor makes
and what it refuses."""

from __future__ import annotations

import pytest

from mallory.scenario.events import (
    Message,
    ScenarioError,
    ScenarioEvent,
    client,
    code,
    fault,
    log,
    receive,
    send,
)
from mallory.timeline.event import Kind

M = Message("7", "n1", "n2", "append-entries", b"\x01\x00")


def test_a_send_happens_at_the_sender_and_a_receipt_at_the_receiver():
    assert send(M) == ScenarioEvent("n1", Kind.SEND, message=M)
    assert receive(M) == ScenarioEvent("n2", Kind.RECV, message=M)
    assert str(send(M)) == "n1 SEND append-entries n1->n2 #7"


def test_other_events_carry_names_in_the_timelines_kinds():
    assert code("n1", "commit") == ScenarioEvent("n1", Kind.FUNC, "commit")
    assert code("n1", "truncate", Kind.BLOCK).kind is Kind.BLOCK
    assert log("n3", "lost-quorum") == ScenarioEvent("n3", Kind.LOG, "lost-quorum")
    assert client("write", "invoke") == ScenarioEvent("", Kind.CLIENT_INVOKE, "write:invoke")
    assert client("write", "info").kind is Kind.CLIENT_COMPLETE
    assert str(fault("partition:one")) == "- FAULT partition:one"


@pytest.mark.parametrize(("make", "error"), [
    (lambda: Message("1", "n1", "n2", "cafe"), "not a message type name"),   # reads as payload hex
    (lambda: Message("1", "n1", "n2", "cont"), "not a message type name"),
    (lambda: Message("", "n1", "n2", "append"), "needs an id"),
    (lambda: ScenarioEvent("n1", Kind.SEND), "needs message"),
    (lambda: ScenarioEvent("n1", Kind.FUNC, "x", message=M), "has no message"),
    (lambda: ScenarioEvent("n1", Kind.LOG), "needs a name"),
    (lambda: ScenarioEvent("n1", Kind.WINDOW_START, "w"), "no WINDOW_START event"),
    (lambda: code("n1", "x", Kind.LOG), "FUNC or BLOCK"),
    (lambda: client("write", "done"), "client event's type"),
])
def test_malformed_events_are_refused(make, error):
    with pytest.raises(ScenarioError, match=error):
        make()
