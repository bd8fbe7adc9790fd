"""etcd 3.4 (Debian's etcd-server) as the fuzzer sees it: a 3-member cluster in network
namespaces, an observer in every node (packets and the adapter's log-derived events) and
the mediator in the gateway. The register workload (CAS through txn) checks linearizable,
list-append checks with Elle; kill, pause and a partition through the mediator each leave
the cluster serving once healed; the membership fault removes a member and adds it back;
and the mediator's recording holds the nodes' packets and named LOG events ("became-leader"
on the member that took over from the killed leader, snapshots, membership changes)."""

from __future__ import annotations

import io
import random
import uuid
from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import ListAppendWorkload
from mallory.history.ops import read_history
from mallory.oracles.elle import check_elle
from mallory.oracles.logs import scan_log
from mallory.polling import wait_until
from mallory.suts.etcd.adapter import EtcdAdapter
from mallory.suts.etcd.client import EtcdClient
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind
from nemesis.faults.base import FaultContext
from nemesis.faults.membership import MembershipFaults
from tests.live import stack as live

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def cluster(tmp_path: Path):
    with live.netns_cluster("etcd", tmp_path / "data") as c:
        yield c


def leader(sut: EtcdAdapter, among: list[str] | None = None, timeout: float = 20.0) -> str:
    """The one running member (of `among`) that says it leads and serves a linearizable read."""

    def one() -> str | None:
        found = [n for n in sut.primaries() if among is None or n in among]
        return found[0] if len(found) == 1 and sut.probe(found[0]) else None

    return wait_until(one, timeout, "one etcd leader that serves")  # type: ignore[return-value]


def serves(sut: EtcdAdapter, value: int, among: list[str] | None = None) -> str:
    """Write `value` through the leader, read it back from every member of `among`."""
    lead = leader(sut, among)
    client = EtcdClient(sut.backend.client_address(lead), sut.port, "register", timeout=5.0)
    try:
        assert client.invoke({"f": "write", "value": value}).type == "ok"
    finally:
        client.close()
    for node in among or sut.backend.nodes:
        reader = EtcdClient(sut.backend.client_address(node), sut.port, "register", timeout=5.0)
        try:
            wait_until(lambda: reader.invoke({"f": "read", "value": None}).value == value, 20, f"{node} to read {value}")
        finally:
            reader.close()
    return lead


def register_run(sut: EtcdAdapter, out: Path, seconds: float) -> int:
    client = EtcdClient(sut.backend.client_address(leader(sut)), sut.port, "register", timeout=5.0)
    initial = client.invoke({"f": "read", "value": None}).value
    client.close()
    return live.checked_register_run(sut, out, seconds, initial, rate=150)


def test_etcd_cluster_workloads_faults_and_log_events(cluster, tmp_path: Path) -> None:
    sut = EtcdAdapter(cluster, snapshot_count=100)
    with live.observed(cluster, tmp_path / "rec", log_watch=sut.log_watch) as mediator:
        try:
            start_all(sut)
            first = serves(sut, 1)
            assert register_run(sut, tmp_path / "run1", 3.0) > 100

            summary = record_run(sut, ListAppendWorkload(), RunConfig(concurrency=3, time_limit=2.0, rate=100), tmp_path / "la")
            assert summary.completions["ok"] > 50
            _, history = read_history(tmp_path / "la" / "history.edn")
            result = check_elle(history, "list-append")
            assert result.valid is True, result.explanation

            sut.kill(first)  # kill the leader: another member takes over; the restarted one rejoins
            successor = serves(sut, 2, among=[n for n in cluster.nodes if n != first])
            assert successor != first
            sut.start(first)
            sut.wait_ready(first)
            serves(sut, 3)

            paused = leader(sut)  # pause the leader: the others elect; it follows on resume
            sut.pause(paused)
            serves(sut, 4, among=[n for n in cluster.nodes if n != paused])
            sut.resume(paused)
            serves(sut, 5)

            third = leader(sut)  # partition the leader away through the gateway's firewall
            rest = [n for n in cluster.nodes if n != third]
            mediator.partition([[third], rest])
            serves(sut, 6, among=rest)
            mediator.heal()
            serves(sut, 7)

            ctx = FaultContext(backend=cluster, adapter=sut, mediator=mediator)
            faults = MembershipFaults()
            assert faults.unsupported(ctx, "remove") is None and faults.unsupported(ctx, "promote") is None
            report = faults.enact(ctx, "remove", random.Random(3))
            (removed,) = report.nodes
            assert removed not in sut.member_ids() and not sut.is_running(removed)
            serves(sut, 8, among=[n for n in cluster.nodes if n != removed])
            faults.heal(ctx, report)
            assert set(sut.member_ids()) == set(cluster.nodes)
            serves(sut, 9)
            report = faults.enact(ctx, "promote", random.Random(4))
            assert report.verified, report.evidence
            faults.heal(ctx, report)

            # removed, then started again (as the nemesis's reset does): it is added back first
            report = faults.enact(ctx, "remove", random.Random(5))
            (removed,) = report.nodes
            sut.start(removed)
            sut.wait_ready(removed)
            assert set(sut.member_ids()) == set(cluster.nodes)

            # removed, then every other member killed: the heal has no one to ask and is
            # deferred (not raised into the campaign); starting the node later adds it back
            report = faults.enact(ctx, "remove", random.Random(6))
            (removed,) = report.nodes
            others = [n for n in cluster.nodes if n != removed]
            for node in others:
                sut.kill(node)
            faults.heal(ctx, report)
            assert not sut.is_running(removed)
            for node in [*others, removed]:
                sut.start(node)
            for node in cluster.nodes:
                sut.wait_ready(node)
            assert set(sut.member_ids()) == set(cluster.nodes)

            # no leader to move leadership away from (a majority paused): promote changes nothing
            lone = leader(sut)
            paused = [n for n in cluster.nodes if n != lone]
            for node in paused:
                sut.pause(node)
            wait_until(lambda: not sut.primaries(), 20, "the lone member to step down")
            sut.promote(paused[0])
            assert sut.primaries() == []
            for node in paused:
                sut.resume(node)
            serves(sut, 10)

            assert register_run(sut, tmp_path / "run2", 2.0) > 50
            for node in cluster.nodes:
                text = "\n".join(p.read_text(errors="replace") for p in sut.log_paths(node) if p.exists())
                assert scan_log(text.splitlines(), node) == [], node
        finally:
            teardown_all(sut)

    events = live.node_events(tmp_path / "rec", cluster.nodes)
    kinds = Counter(e.kind for e in events)
    assert kinds[Kind.SEND] > 500 and kinds[Kind.RECV] > 500, kinds
    logs = [e for e in events if e.kind == Kind.LOG]
    names = Counter(e.data for e in logs)
    named = {p.name for p in sut.log_events if p.name}
    for name in ("became-leader", "became-follower", "became-candidate", "elected-leader", "snapshot-saved",
                 "member-added", "member-removed", "configuration-changed", "peer-inactive", "leader-transfer"):  # fmt: skip
        assert names[name] > 0, (name, names)
    # the killed leader's successor logged "became leader" after the kill
    assert any(e.data == "became-leader" and e.node == successor for e in logs), Counter((e.node, e.data) for e in logs)
    unnamed = set(names) - named
    assert unnamed and all("<" in n for n in unnamed), unnamed  # raft lines by their normalised message


@pytest.mark.parametrize("fault", ["kill:primaries", "pause:primaries", "partition:primaries"])
def test_the_nemesis_fault_then_reset_leaves_a_serving_cluster(cluster, tmp_path: Path, fault: str) -> None:
    """Each fault as the campaign enacts it (on the leader), then the nemesis's reset: the
    cluster is healthy again and a register run on it checks linearizable."""
    from nemesis.nemesis import Nemesis

    mediator_proc, mediator = live.start_mediator(cluster)
    sut = EtcdAdapter(cluster)
    try:
        start_all(sut)
        before = leader(sut)
        nemesis = Nemesis(FaultContext(backend=cluster, adapter=sut, mediator=mediator), [fault])
        report = nemesis.enact(fault, random.Random(1))
        assert report.verified and before in report.nodes, report
        assert all(before in link.split("->") for link in report.links), report.links  # the leader cut off
        serves(sut, 1, among=[n for n in cluster.nodes if n != before])  # the majority carries on
        reset = nemesis.reset()
        assert reset.healthy, reset.problems
        serves(sut, 2)
        assert register_run(sut, tmp_path / "run", 1.5) > 30
    finally:
        teardown_all(sut)
        live.stop(cluster, [mediator_proc])


def test_the_campaigns_observed_cluster_gives_observers_the_adapters_log_events(tmp_path: Path) -> None:
    """ObservedCluster (what `mallory fuzz` starts) makes the adapter before the observers
    and hands each its node's patterns: LOG events reach the mediator's recording."""
    from mallory.campaign.netns_stack import ObservedCluster

    with ObservedCluster(f"etcdo-{uuid.uuid4().hex[:5]}", 3, record_dir=tmp_path / "rec", adapter_factory=EtcdAdapter) as stack:
        sut = stack.adapter
        assert isinstance(sut, EtcdAdapter)
        try:
            start_all(sut)
            sut.kill(before := leader(sut))
            after = leader(sut, among=[n for n in stack.cluster.nodes if n != before])

            def recorded() -> list:
                path = tmp_path / "rec" / "events.jsonl"
                data = path.read_bytes() if path.exists() else b""
                complete = io.BytesIO(data[: data.rfind(b"\n") + 1])  # the mediator may be mid-line
                return [e for r in read_records(complete) if isinstance(r, Batch) for e in r.events
                        if e.kind == Kind.LOG and e.node == after and e.data == "became-leader"]  # fmt: skip

            wait_until(recorded, 20, f"{after}'s became-leader event in the recording")
        finally:
            teardown_all(sut)
