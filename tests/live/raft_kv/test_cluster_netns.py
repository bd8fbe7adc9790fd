"""raft-kv as the fuzzer sees it: a 3-node netns cluster with an observer in every node and
the mediator in the gateway. The register workload (through the gateway) checks
linearizable and list-append checks under Elle; kill, pause and partition each leave it
serving again once healed; the nemesis's membership fault removes a node and its heal adds
it back at once, under a fresh raft id; and the mediator's recording holds the nodes' packets, their annotated code
events by name, and the LOG events the spec's [[log_events]] make of libraft's trace and
the server's lines."""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import RegisterWorkload, make_workload
from mallory.history.ops import read_history
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.oracles.elle import check_elle
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.logs import DEFAULT_PATTERNS, scan_log
from mallory.oracles.models import CasRegister
from mallory.polling import wait_until
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind
from nemesis.faults.base import FaultContext
from nemesis.faults.membership import MembershipFaults
from tests.live import stack as live_stack
from tests.live.raft_kv import raft_cluster as rc

pytestmark = pytest.mark.timeout(300)


def _workload(sut, out: Path, seconds: float) -> int:
    """The register workload on key 0 for `seconds`; checked from the value it starts with."""
    reply = rc.ask(sut, rc.wait_leader(sut), "GET 0")
    assert reply.startswith("OK ")
    initial = None if reply == "OK nil" else int(reply[3:])
    summary = record_run(sut, RegisterWorkload(), RunConfig(concurrency=3, time_limit=seconds, rate=150), out)
    _, history = read_history(out / "history.edn")
    result = check_linearizable(history, CasRegister(initial))
    assert result.valid is True, result.explanation
    return summary.completions["ok"]


def _serves(sut, value: int, among: list[str] | None = None) -> str:
    """Write `value` through the one leader and read it back; the leader."""
    leader = rc.wait_leader(sut, 20, among)
    assert rc.ask(sut, leader, f"PUT r {value}") == "OK"
    assert rc.ask(sut, leader, "GET r") == f"OK {value}"
    return leader


def test_observed_cluster_survives_faults_and_membership_changes(cluster, binary, tmp_path: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(binary))
    mediator_proc, mediator = live_stack.start_mediator(cluster, tmp_path / "rec")
    sut = rc.adapter(cluster, binary, "--snapshot-threshold", "32", "--snapshot-trailing", "8")
    observers = rc.start_observers(cluster, sut)
    wait_until(
        lambda: all(mediator.metrics()["ingest"]["nodes"].get(n, {}).get("batches", 0) > 0 for n in cluster.nodes),
        20,
        "batches from every observer (each has created its node's ring)",
    )
    try:
        start_all(sut)
        leader = _serves(sut, 1)
        assert _workload(sut, tmp_path / "run1", 2.0) > 20  # a loaded 2-core host still does dozens

        sut.kill(leader)  # kill: another node takes over; the restarted one rejoins
        second = _serves(sut, 2)
        assert second != leader
        sut.start(leader)
        sut.wait_ready(leader)

        sut.pause(second)  # pause: the others elect; the resumed one follows
        third = _serves(sut, 3, among=[n for n in cluster.nodes if n != second])
        sut.resume(second)
        _serves(sut, 4)

        third = rc.wait_leader(sut)
        rest = [n for n in cluster.nodes if n != third]  # partition the leader away
        mediator.partition([[third], rest])
        fourth = _serves(sut, 5, among=rest)
        mediator.heal()
        assert _serves(sut, 6) in cluster.nodes

        # the nemesis's membership fault: remove a node, heal = add it back (empty, caught up)
        ctx = FaultContext(backend=cluster, adapter=sut, mediator=mediator)
        faults = MembershipFaults()
        assert faults.unsupported(ctx, "remove") is None and faults.unsupported(ctx, "promote") is None
        report = faults.enact(ctx, "remove", random.Random(7))
        (removed,) = report.nodes
        assert sut.raft_address(removed) not in sut.members() and not sut.is_running(removed)
        _serves(sut, 7)
        # What the removed process sent last may still be in flight: TCP keeps retransmitting
        # a closed socket's data, with the backoff the partition above left it. The node comes
        # back at once, under a fresh raft id, so libraft does not take those replies for the
        # new one's (under the old id, a stale match index wedged the leader's catch-up and
        # every ASSIGN failed, until the old connections had drained).
        faults.heal(ctx, report)
        assert sut.members() == {sut.raft_address(n): "voter" for n in cluster.nodes}
        sut.wait_ready(removed)
        report = faults.enact(ctx, "promote", random.Random(8))
        assert report.verified, report.evidence
        faults.heal(ctx, report)

        assert fourth in cluster.nodes
        assert _workload(sut, tmp_path / "run2", 1.5) > 10
        summary = record_run(sut, make_workload("list-append"), RunConfig(concurrency=3, time_limit=1.5, rate=150), tmp_path / "run3")
        assert summary.completions["ok"] > 10
        result = check_elle(read_history(tmp_path / "run3" / "history.edn")[1], "list-append")
        assert result.valid is True, result.explanation
        for node in cluster.nodes:
            assert scan_log(rc.log_text(sut, node).splitlines(), node, sut.log_bugs + DEFAULT_PATTERNS) == []
            assert "snapshot taken: " in rc.log_text(sut, node)
    finally:
        teardown_all(sut)
        for proc in observers.values():
            cluster.signal(proc, signal.SIGTERM)
        for proc in observers.values():
            cluster.wait(proc, 10)
        cluster.signal(mediator_proc, signal.SIGTERM)
        cluster.wait(mediator_proc, 10)

    with open(tmp_path / "rec" / "events.jsonl", "rb") as f:
        events = [e for r in read_records(f) if isinstance(r, Batch) for e in r.events if e.node in cluster.nodes]
    kinds = Counter(e.kind for e in events)
    assert kinds[Kind.SEND] > 500 and kinds[Kind.RECV] > 500
    code = {n: Counter(catalogue.name(e.id) for e in events if e.node == n and e.kind in (Kind.FUNC, Kind.BLOCK)) for n in cluster.nodes}
    everywhere: Counter = Counter()
    for node, names in code.items():
        assert set(names) <= rc.LABELS, names  # every code event is an annotation of the catalogue
        assert names["apply"] > 0 and names["snapshot"] > 0 and names["state-change"] > 0, (node, names)
        everywhere.update(names)
    for label in ("became-leader", "became-candidate", "became-follower", "leader-change", "membership-change",
                  "snapshot-index-advanced", "client-request", "client-command", "admin-command", "shutdown"):  # fmt: skip
        assert everywhere[label] > 0, (label, everywhere)
    assert everywhere["became-leader"] >= 4

    # the library's trace and the server's lines, as LOG events named by the spec
    logs = Counter((e.node, e.data) for e in events if e.kind == Kind.LOG)
    names = Counter(name for (_, name) in logs.elements())
    assert set(names) <= {p.name for p in sut.log_events}, names
    for name in ("libraft-won-election", "libraft-vote-granted", "libraft-take-snapshot", "libraft-config-uncommitted",
                 "raft-kv-became-leader", "raft-kv-snapshot-taken", "raft-kv-configuration-changed"):  # fmt: skip
        assert names[name] > 0, (name, names)
    for node in cluster.nodes:
        assert logs[(node, "libraft-take-snapshot")] > 0, (node, logs)
