"""The shipped Raft models (suts/example/model.py, suts/raft/model.py) on hand-built event
sequences after what the SUTs emit (the orders seen in recorded campaigns): elections,
faults, snapshots, and the steps each model refuses."""

from __future__ import annotations

import pytest

from mallory import paths
from mallory.campaign.model import bind_model, load_model
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.learner.model import ModelCoverage, ModelReplay, Step

NODES = ("n1", "n2", "n3")
EXAMPLE = paths.HOME / "suts" / "example" / "model.py"
RAFT_KV = paths.HOME / "suts" / "raft" / "model.py"


def replay(path, steps):
    return ModelReplay(load_model(path), NODES).run(steps)


def cut(node: str) -> Step:
    """A partition that cuts `node` off both ways (a report's links)."""
    links = tuple((a, b) for a in NODES for b in NODES if a != b and node in (a, b))
    return Step("fault:partition", "mediator", NODES, links)


# -- the example SUT -----------------------------------------------------------------

def test_example_an_election_and_replication_are_taken_and_reach_distinct_states():
    trace = replay(EXAMPLE, [
        Step("election-started", "n1"), Step("stepped-down", "n2"), Step("stepped-down", "n3"),
        Step("became-leader", "n1"), Step("replicate", "n1"), Step("append-received", "n2"),
        Step("apply", "n1"), Step("apply", "n2"),
    ])
    assert trace.mismatches == ()
    # all unknown, a candidate, then one and two followers, a leader, a leader that applied
    assert len(trace.states) == 6


@pytest.mark.parametrize("steps, refused", [
    ([Step("stepped-down", "n1"), Step("became-leader", "n1")], "became-leader"),  # not a candidate
    ([Step("stepped-down", "n1"), Step("replicate", "n1")], "replicate"),  # a follower sending appends
    ([Step("became-leader", "n1"), Step("election-started", "n1")], "election-started"),
    ([Step("election-started", "n3"), cut("n3"), Step("became-leader", "n3")], "became-leader"),
    ([Step("fault:kill", "mediator", ("n2",)), Step("apply", "n2")], "apply"),  # a dead node spoke
    ([Step("sticky-leader-kept-term", "n1")], "sticky-leader-kept-term"),  # the seeded bug's step
])
def test_example_refuses_what_raft_forbids(steps, refused):
    assert replay(EXAMPLE, steps).mismatches == (refused,)


def test_example_a_heal_brings_killed_nodes_back_unknown_and_paused_ones_as_they_were():
    replay_ = ModelReplay(load_model(EXAMPLE), NODES)
    replay_.run([Step("election-started", "n1"), Step("became-leader", "n1"), Step("stepped-down", "n2"),
                 Step("fault:kill", "mediator", ("n2",)), Step("fault:pause", "mediator", ("n1",)),
                 Step("fault:heal", "mediator")])
    assert replay_.state.roles == {"n1": "leader", "n2": "?", "n3": "?"} and replay_.state.down == {}
    assert replay_.run([Step("replicate", "n1"), Step("apply", "n2")]).mismatches == ()


def test_example_a_paused_node_that_speaks_before_the_heals_event_was_resumed():
    """As schedule 18 of a recorded example-bugs campaign went: the leader n2 is paused, n1
    wins an election, and the heal resumes n2, which steps down on n1's append 1.2 ms before
    the heal's event; it stays a follower, and its next election is no mismatch."""
    trace = replay(EXAMPLE, [
        Step("replicate", "n2"), Step("fault:pause", "mediator", ("n2",)),
        Step("election-started", "n1"), Step("stepped-down", "n3"), Step("became-leader", "n1"),
        Step("replicate", "n1"), Step("append-received", "n3"),
        Step("stepped-down", "n2"), Step("fault:heal", "mediator"),
        Step("append-received", "n2"), Step("election-started", "n2"),
    ])
    assert trace.mismatches == ()


@pytest.mark.parametrize("steps, refused", [
    # a killed node does not speak until the heal restarts it
    ([Step("fault:kill", "mediator", ("n2",)), Step("append-received", "n2"), Step("fault:heal", "mediator")],
     "append-received"),
    # a resumed node is where stall-catchup fires: its step stays refused
    ([Step("fault:pause", "mediator", ("n2",)), Step("stall-catchup-applied", "n2"), Step("append-received", "n2")],
     "stall-catchup-applied"),
    # a resumed leader keeps its role: a leader's timer still never fires
    ([Step("became-leader", "n2"), Step("fault:pause", "mediator", ("n2",)), Step("election-started", "n2")],
     "election-started"),
])
def test_example_a_resumed_node_is_held_to_raft_and_a_killed_one_stays_silent(steps, refused):
    assert replay(EXAMPLE, steps).mismatches == (refused,)


# -- raft-kv ---------------------------------------------------------------------------

#: a failover as raft-kv's recording shows it: the leader n1 is killed, n2 times out,
#: gets n3's vote and wins; n3 installs a snapshot from it
FAILOVER = [
    Step("became-leader", "n1"), Step("became-follower", "n2"), Step("became-follower", "n3"),
    Step("fault:kill", "mediator", ("n1",)), Step("leader-lost", "n2"), Step("leader-lost", "n3"),
    Step("became-candidate", "n2"), Step("libraft-vote-granted", "n3"), Step("became-leader", "n2"),
    Step("snapshot", "n2"), Step("restore", "n3"), Step("apply", "n3"),
    Step("fault:heal", "mediator"), Step("became-follower", "n1"), Step("apply", "n1"),
]


def test_raft_kv_a_failover_is_taken_without_a_mismatch_and_each_step_is_a_state():
    trace = replay(RAFT_KV, FAILOVER)
    assert trace.mismatches == ()
    # every step but the four that change nothing the model follows (leader-lost twice,
    # apply twice) leads to a new state; the start is one more
    assert len(trace.states) == 1 + len(FAILOVER) - 4


@pytest.mark.parametrize("steps, refused", [
    ([Step("became-follower", "n1"), Step("became-follower", "n1")], "became-follower"),
    ([Step("became-leader", "n1"), Step("became-leader", "n1")], "became-leader"),
    ([Step("became-leader", "n1"), Step("became-candidate", "n1")], "became-candidate"),
    ([Step("became-follower", "n1"), cut("n1"), Step("became-candidate", "n1"), Step("became-leader", "n1")],
     "became-leader"),
    ([Step("became-follower", "n1"), Step("fault:membership:promote-cut-off", "mediator", ("n1",), cut("n1").links),
      Step("became-leader", "n1")], "became-leader"),
    ([Step("fault:stop", "mediator", ("n3",)), Step("apply", "n3")], "apply"),
    ([Step("fault:kill", "mediator", ("n3",)), Step("became-follower", "n3")], "became-follower"),
    ([Step("unavailable-exit", "n2"), Step("snapshot", "n2")], "snapshot"),
])
def test_raft_kv_refuses_what_raft_forbids(steps, refused):
    assert replay(RAFT_KV, steps).mismatches == (refused,)


def test_raft_kv_a_follower_may_become_leader_its_candidacy_unseen():
    """raft-kv samples its role once per event-loop iteration, and an election won within
    one shows as "became leader (was follower)" (runs/000006 of a recorded campaign: the
    timer fired and n3's vote came back 2 ms later, in the same poll)."""
    trace = replay(RAFT_KV, [Step("became-follower", "n1"), Step("became-leader", "n1")])
    assert trace.mismatches == () and len(trace.states) == 3


def test_raft_kv_a_paused_node_stopped_speaks_before_the_stops_event():
    """The stop resumes a paused node so that it can act on its stop signal, and its FAULT
    event comes once the node exited: the applies in between are no mismatch, an event
    after the stop's is."""
    trace = replay(RAFT_KV, [
        Step("became-leader", "n3"), Step("fault:pause", "mediator", ("n1", "n3")),
        Step("apply", "n3"), Step("apply", "n3"), Step("fault:stop", "mediator", ("n1", "n2", "n3")),
        Step("apply", "n3"),
    ])
    assert trace.mismatches == ("apply",)


def test_raft_kv_a_removed_node_is_back_when_it_speaks_and_its_role_starts_unknown():
    """The heal of a removal starts the node afresh and waits for it to join: its first
    events come before the heal's FAULT event."""
    replay_ = ModelReplay(load_model(RAFT_KV), NODES)
    trace = replay_.run([
        Step("became-leader", "n1"), Step("became-follower", "n3"),
        Step("fault:membership:remove", "mediator", ("n3",)),
        Step("became-follower", "n3"), Step("restore", "n3"), Step("membership-change", "n3"),
        Step("fault:heal", "mediator"),
    ])
    assert trace.mismatches == ()
    assert replay_.state.roles["n3"] == "follower" and replay_.state.down == {}
    paused = ModelReplay(load_model(RAFT_KV), NODES)
    paused.run([Step("became-leader", "n1"), Step("fault:membership:promote-paused", "mediator", ("n2",))])
    assert paused.state.down == {"n2": "pause"}


def test_raft_kv_nodes_are_interchangeable_so_names_make_no_states():
    renamed = [s._replace(node={"n1": "n3", "n3": "n1"}.get(s.node, s.node),
                          targets=tuple({"n1": "n3", "n3": "n1"}.get(t, t) for t in s.targets)) for s in FAILOVER]
    coverage = ModelCoverage()
    coverage.add(replay(RAFT_KV, FAILOVER))
    assert coverage.add(replay(RAFT_KV, renamed)).new_states == 0


def test_the_mappings_bind_to_the_annotations_and_log_events_the_suts_declare():
    """Every name a shipped model maps is an annotation label of its SUT's source or a log
    event of its spec (or a fault), so a campaign does not refuse it."""
    for model_path, source, spec in ((EXAMPLE, "suts/example/example_sut.c", None),
                                     (RAFT_KV, "suts/raft/raft_kv.c", "suts/raft/raft.toml")):
        text = (paths.HOME / source).read_text()
        labels = [line.split("INSTRUMENT_")[1].split()[1] for line in text.splitlines() if "// INSTRUMENT_" in line]
        catalogue = Catalogue([CodeEvent(i + 1, source, i + 1, "f", "FUNC", label) for i, label in enumerate(labels)])
        logs = []
        if spec:
            logs = [line.split('"')[1] for line in (paths.HOME / spec).read_text().splitlines() if line.startswith("name =")]
        feed = bind_model(load_model(model_path), NODES, catalogue, logs)
        assert feed.trace_types
