"""mallory.jepsen held to Jepsen 0.3.x's behaviour (one JVM, stand-ins of Jepsen's namespaces
that behave like Jepsen's combinators, a live in-process mediator): kill and pause offered
only for a DB that can, file-corruption distributions drawn for each op, and the README's
wiring run under an interpreter that drives generators as Jepsen's does. The mediator must
have seen exactly the faults the run enacted and the client ops it relayed."""

from __future__ import annotations

import pytest

from mallory.mediator.advisor import Advisor
from mallory.polling import wait_until
from tests.live.jepsen_bridge.clojure_run import (
    BRIDGE,
    RecordingLearner,
    own_events,
    run_program,
    start_mediator,
)


@pytest.fixture(scope="module")
def live():
    m = start_mediator({"n1": "10.9.1.2"})
    learner = RecordingLearner.create(policy="qlearning", seed=11)
    m.advisor = Advisor(m.windows, learner, wait_s=5.0)
    try:
        yield m, learner, run_program("mallory/jepsen/combinators_test.clj", m, str(BRIDGE / "README.md"))
    finally:
        m.stop()


def test_the_clojure_checks_pass(live):
    _, _, run = live
    result = run.result()
    assert result["faults"] and result["clients"] > 10


def test_the_mediator_saw_the_readme_runs_faults_and_client_ops(live):
    m, learner, run = live
    result = run.result()

    def settled():
        events = own_events(m)
        invokes = [e for e in events if e[0] == "CLIENT_INVOKE"]
        return len(invokes) >= result["clients"] and events

    events = wait_until(settled, 10, "the relayed client ops")
    logs = [data for kind, _, data in events if kind == "LOG"]
    faults = [data for kind, _, data in events if kind == "FAULT"]
    assert logs == ["test-start:my-db", "test-end"]
    assert [f.split(":")[0] for f in faults] == result["faults"]  # each enacted fault reported, in order
    assert faults == learner.chosen[: len(faults)]
    assert len([e for e in events if e[0] == "CLIENT_INVOKE"]) == result["clients"]
    assert len([e for e in events if e[0] == "CLIENT_COMPLETE"]) == result["clients"]
    assert m.api.rejected == 0, m.api.reasons
