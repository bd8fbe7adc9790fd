"""mallory.jepsen, loaded by Debian's clojure (one JVM) against stand-ins of Jepsen's
namespaces and a live in-process mediator: the catalogue from the standard packages, the
adaptive generator driven as Jepsen's interpreter drives one (Jepsen's op shapes, :pending
while the mediator decides, while the fault runs and while its window is open), the final
generator, the client wrapper, and the README's wiring compiled. The mediator must have
seen exactly the generator's faults and the wrapper's ops."""

from __future__ import annotations

import re

import pytest

from mallory.history.edn import loads, read_all
from mallory.mediator.advisor import Advisor
from mallory.polling import wait_until
from tests.live.jepsen_bridge.clojure_run import (
    BRIDGE,
    RecordingLearner,
    own_events,
    plain,
    run_program,
    start_mediator,
)

CATALOGUE = ["start-partition:majority", "start-partition:one", "stop-partition",
             "bump-clock:all", "strobe-clock:all", "reset-clock:all", "kill:one", "kill:all", "start:all"]


@pytest.fixture(scope="module")
def live():
    m = start_mediator({"n1": "10.9.1.2"})
    learner = RecordingLearner.create(policy="qlearning", seed=7)
    m.advisor = Advisor(m.windows, learner, wait_s=5.0)
    try:
        yield m, learner, run_program("mallory/jepsen/generator_test.clj", m)
    finally:
        m.stop()


def test_the_clojure_checks_pass_and_the_catalogue_reached_the_advisor(live):
    m, _, run = live
    result = run.result()
    assert result["catalogue"] == CATALOGUE
    assert m.advisor.actions == CATALOGUE
    assert len(result["actions"]) == 3 and set(result["actions"]) <= set(CATALOGUE)


def test_the_mediator_saw_the_generators_faults_then_the_wrappers_ops(live):
    m, learner, run = live
    actions = run.result()["actions"]
    client = [("CLIENT_INVOKE", 3, "write:invoke"), ("CLIENT_COMPLETE", 3, "write:ok"),
              ("CLIENT_INVOKE", 3, "boom:invoke"), ("CLIENT_COMPLETE", 3, "boom:info")]
    expected = ([("LOG", 0, "test-start:mallory-generator-test")] + [("FAULT", 0, a) for a in actions]
                + [("LOG", 0, "test-end")] + client)
    seen = wait_until(lambda: (e := own_events(m)) and len(e) >= len(expected) and e, 10, "the bridge's events")
    assert seen == expected
    assert learner.chosen == actions  # one learner decision per generator ask, and only those
    assert m.advisor.requests == 3
    assert m.api.rejected == 0, m.api.reasons


def test_the_readme_diff_turns_the_before_block_into_the_after_block():
    text = (BRIDGE / "README.md").read_text()
    before, after = re.findall(r"```clojure\n(.*?)```", text, re.S)
    (diff,) = re.findall(r"```diff\n(.*?)```", text, re.S)
    old = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "-")]
    new = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "+")]
    assert "\n".join(old) in before  # the diff's hunk is the before block's head...
    assert "\n".join(new) in after   # ...and applied, the after block's
    assert before.replace("\n".join(old), "\n".join(new)) == after


def test_the_build_files_read_and_put_the_sources_on_the_path():
    deps = plain(loads((BRIDGE / "deps.edn").read_text(), source="deps.edn"))
    assert deps["paths"] == ["src"] and (BRIDGE / "src" / "mallory" / "jepsen.clj").exists()
    (project,) = read_all((BRIDGE / "project.clj").read_text(), source="project.clj")
    assert project[:3] == ["defproject", "mallory/jepsen-bridge", "0.1.0"]
    options = dict(zip(project[3::2], project[4::2]))
    assert options["source-paths"] == ["src"]
