"""mallory.jepsen.mediator for real: a Clojure program (Debian's clojure, one JVM) drives a
live in-process mediator through a short Jepsen-like test, and the mediator's timeline and
learner must have seen exactly that: the client ops each round relayed, one window judged
per next-fault request, the reported faults, in order. The same program checks the errors
for a mediator that is down, one that never answers, a wrong token and a bad catalogue."""

from __future__ import annotations

import pytest

from mallory.mediator.advisor import Advisor
from mallory.polling import wait_until
from tests.live.jepsen_bridge.clojure_run import (
    RecordingLearner,
    own_events,
    run_program,
    start_mediator,
)

ROUNDS = 4


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    checkpoint = tmp_path_factory.mktemp("learner") / "learner"
    m = start_mediator({"n1": "10.9.1.2", "n2": "10.9.2.2"})
    learner = RecordingLearner.create(policy="qlearning", seed=11)
    m.advisor = Advisor(m.windows, learner, checkpoint=checkpoint, wait_s=5.0)
    try:
        run = run_program("mallory/jepsen/mediator_live.clj", m)
        yield m, learner, checkpoint, run
    finally:
        m.stop()


def round_ops(i: int) -> list[tuple[str, int, str]]:
    return [("CLIENT_INVOKE", 1, f"w{i}:invoke"), ("CLIENT_INVOKE", 2, f"r{i}:invoke"),
            ("CLIENT_COMPLETE", 1, f"w{i}:ok"), ("CLIENT_COMPLETE", 2, f"r{i}:fail")]


def test_the_clojure_program_passes_and_saw_every_answer(live):
    _, _, _, run = live
    rounds = run.result()["rounds"]
    assert len(rounds) == ROUNDS
    assert all(r["late"] is False and r["events"] >= 4 for r in rounds), rounds
    # each window starts where the previous request's ended: aligned to the Jepsen side's pace
    assert all(a["window-ns"][1] == b["window-ns"][0] for a, b in zip(rounds, rounds[1:]))


def test_the_timeline_holds_exactly_the_relayed_ops_and_reported_faults_in_order(live):
    m, _, _, run = live
    actions = [r["action"] for r in run.result()["rounds"]]
    expected = [("LOG", 0, "test-start:bridge-live")]
    for i, action in enumerate(actions):
        expected += round_ops(i) + [("FAULT", 0, action)]
    expected.append(("LOG", 0, "test-end"))
    seen = wait_until(lambda: (e := own_events(m)) and len(e) >= len(expected) + 1000 and e, 10, "every relayed op")
    assert seen[:len(expected)] == expected


def test_ops_relayed_by_concurrent_workers_arrive_in_each_processs_order(live):
    m, _, _, run = live
    run.result()
    seen = wait_until(lambda: (e := own_events(m)) and len(e) >= 1000 and e, 10, "the concurrent ops")
    after_end = seen[seen.index(("LOG", 0, "test-end")) + 1:]
    assert len(after_end) == 1000
    for process in range(10, 14):
        mine = [data for _, p, data in after_end if p == process]
        assert mine == [f"c{k}:invoke" for k in range(250)], process


def test_the_learner_judged_one_window_per_request_holding_that_rounds_ops(live):
    m, learner, checkpoint, run = live
    rounds = run.result()["rounds"]
    assert learner.chosen == [r["action"] for r in rounds]
    assert len(learner.shown) == ROUNDS
    for i, summary in enumerate(learner.shown):
        text = " ".join(summary)
        assert f"w{i}:invoke" in text and f"r{i}:fail" in text, (i, sorted(summary))
        others = [j for j in range(ROUNDS) if j != i and f"w{j}:" in text]
        assert not others, f"window {i} also holds round(s) {others}: {sorted(summary)}"
    assert [r["state"] for r in rounds] == [learner.store.lookup(s).state_id for s in learner.shown]
    assert m.advisor.requests == ROUNDS and m.advisor.late == 0
    assert checkpoint.exists()  # /test/end checkpointed the learner


def test_the_refusals_were_counted_and_changed_nothing(live):
    m, _, _, run = live
    run.result()
    reasons = m.api.reasons
    assert m.api.rejected == 2, reasons
    assert any("X-Mallory-Token" in r for r in reasons) and any("1..256" in r for r in reasons)
    assert m.advisor.actions == ["start-partition:majority", "kill:one", "pause:one", "stop-partition"]
