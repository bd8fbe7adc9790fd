"""Leadership transfers and membership changes on raft-kv while the network or a node is
against them (a 3-node netns cluster, the mediator in the gateway; root):

* the nemesis's promote variants transfer leadership to a node that is cut off from every
  other, paused, or lagging (its packets held 300 ms each way): the condition is in force
  while the transfer is asked (libraft lets it time out, or, for a lagging node, it may
  take), the other nodes keep committing, and the heal lifts the condition: the cluster
  serves again with every node;
* the leader is removed while a partition cuts it off from the first other voter: the
  adapter offers leadership to that one, then to the next, which takes it, and the
  removal commits; the node comes back under a fresh raft id once the cut is healed.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from mallory.cluster.registry import proc_state
from mallory.harness.session import start_all, teardown_all
from nemesis.faults.base import FaultContext
from nemesis.faults.membership import MembershipFaults
from tests.live import stack as live_stack
from tests.live.raft_kv import raft_cluster as rc

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def mediated(cluster, tmp_path: Path):
    """The mediator in the gateway of `cluster`: its client; stopped after the test."""
    proc, mediator = live_stack.start_mediator(cluster, tmp_path / "rec")
    try:
        yield mediator
    finally:
        cluster.signal(proc, signal.SIGTERM)
        cluster.wait(proc, 10)


def _serves(sut, value: int, among: list[str]) -> str:
    """Write `value` through the one leader among `among` and read it back; the leader."""
    leader = rc.wait_leader(sut, 20, among)
    assert rc.ask(sut, leader, f"PUT r {value}") == "OK"
    assert rc.ask(sut, leader, "GET r") == f"OK {value}"
    return leader


@pytest.mark.parametrize("spec", ["promote-cut-off", "promote-paused", "promote-lagging"])
def test_leadership_is_asked_of_a_hobbled_node_and_the_heal_lifts_its_condition(cluster, mediated, binary, spec) -> None:
    sut = rc.adapter(cluster, binary)
    ctx = FaultContext(backend=cluster, adapter=sut, mediator=mediated)
    faults = MembershipFaults()
    assert faults.unsupported(ctx, spec) is None
    nodes = list(cluster.nodes)
    try:
        start_all(sut)
        leader = _serves(sut, 1, nodes)
        report = faults.enact(ctx, spec, random.Random(2))
        (target,) = report.nodes
        assert target != leader and report.verified, report.evidence
        assert report.evidence["transfer_refused"] is None
        others = [n for n in nodes if n != target]
        if spec == "promote-paused":
            assert proc_state(sut.process(target).pid) in ("T", "t")
        else:
            rules = {f"{r['src']}->{r['dst']}": r for r in mediated.rules()}
            assert set(rules) == set(report.links) and len(report.links) == 2 * len(others)
            assert all(r["drop"] if spec == "promote-cut-off" else r["delay_ms"] == faults.lag_ms for r in rules.values())
        if spec != "promote-lagging":
            assert not report.evidence["took"] and target not in sut.primaries()  # it cannot have taken
        _serves(sut, 2, nodes if spec == "promote-lagging" else others)  # committing while it is hobbled
        faults.heal(ctx, report)
        assert mediated.rules() == [] or all(not r["drop"] and not r["delay_ms"] for r in mediated.rules())
        for node in nodes:
            sut.wait_ready(node, 30)
        _serves(sut, 3, nodes)
        assert proc_state(sut.process(target).pid) not in ("T", "t")
    finally:
        teardown_all(sut)


def test_the_leader_is_removed_while_a_partition_cuts_it_off_from_the_first_other_voter(cluster, mediated, binary) -> None:
    sut = rc.adapter(cluster, binary, "--pre-vote")  # the cut-off follower must not depose the leader meanwhile
    nodes = list(cluster.nodes)
    try:
        start_all(sut)
        leader = _serves(sut, 1, nodes)
        first, second = [n for n in nodes if n != leader]  # the adapter offers leadership in this order
        mediated.drop([(leader, first), (first, leader)])
        assert rc.wait_leader(sut, 20) == leader  # still leads: it has `second`
        sut.remove_member(leader)
        assert sut.raft_address(leader) not in sut.members() and not sut.is_running(leader)
        assert _serves(sut, 2, [first, second]) == second  # the transfer to `first` could not take
        log = "\n".join(rc.log_text(sut, n) for n in nodes)
        assert f"admin: transfer leadership to {sut.raft_address(first)}" in log
        assert f"admin: transfer leadership to {sut.raft_address(second)}" in log
        mediated.heal()
        sut.add_member(leader)  # back, under a fresh raft id
        sut.wait_ready(leader, 30)
        assert sut.members() == {sut.raft_address(n): "voter" for n in nodes}
        _serves(sut, 3, nodes)
    finally:
        teardown_all(sut)
