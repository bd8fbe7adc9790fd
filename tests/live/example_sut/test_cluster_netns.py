"""The example SUT as the fuzzer sees it: a 3-node netns cluster with an observer in every
node and the mediator in the gateway. It elects a leader, the register workload (through
the gateway) checks linearizable, kill / pause / partition each leave it able to serve
again once healed, and the mediator's recording holds the nodes' packets and their
annotated code events by name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.session import start_all, teardown_all
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.oracles.logs import scan_log
from mallory.timeline.event import Kind
from tests.live import stack as live
from tests.live.example_sut import example_cluster as ex

pytestmark = pytest.mark.timeout(240)


def _workload(sut, out: Path, seconds: float) -> int:
    """The register workload on key 0 for `seconds`; checked from the value it starts with."""
    reply = ex.request(sut.backend.client_address(ex.wait_leader(sut)), "GET 0")
    assert reply.startswith("OK ")
    return live.checked_register_run(sut, out, seconds, None if reply == "OK nil" else int(reply[3:]), rate=150)


def _serves(sut, value: int) -> str:
    """Write `value` through the one leader and read it back; the leader."""
    leader = ex.wait_leader(sut, 15)
    address = sut.backend.client_address(leader)
    assert ex.request(address, f"PUT r {value}") == "OK"
    assert ex.request(address, "GET r") == f"OK {value}"
    return leader


def test_observed_cluster_survives_kill_pause_and_partition(cluster, binary, tmp_path: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(binary))
    with live.observed(cluster, tmp_path / "rec", timeout=20) as mediator:
        sut = ex.adapter(cluster, binary)
        try:
            start_all(sut)
            leader = _serves(sut, 1)
            assert _workload(sut, tmp_path / "run1", 2.0) > 100

            sut.kill(leader)  # kill: another node takes over; the restarted one rejoins
            second = _serves(sut, 2)
            assert second != leader
            sut.start(leader)
            sut.wait_ready(leader)

            sut.pause(second)  # pause: the others elect; the resumed one follows
            third = _serves(sut, 3)
            assert third != second
            sut.resume(second)

            rest = [n for n in cluster.nodes if n != third]  # partition the leader away
            mediator.partition([[third], rest])
            fourth = ex.wait_leader(sut, 15, among=rest)
            assert ex.request(cluster.client_address(fourth), "PUT r 4") == "OK"
            mediator.heal()
            assert _serves(sut, 5) in cluster.nodes
            assert _workload(sut, tmp_path / "run2", 1.5) > 50
            for node in cluster.nodes:
                assert scan_log(ex.log_text(sut, node).splitlines(), node) == []
        finally:
            teardown_all(sut)

    events = live.node_events(tmp_path / "rec", cluster.nodes)
    kinds = Counter(e.kind for e in events)
    assert kinds[Kind.SEND] > 500 and kinds[Kind.RECV] > 500
    code = {node: Counter(catalogue.name(e.id) for e in events if e.node == node and e.kind in (Kind.FUNC, Kind.BLOCK)) for node in cluster.nodes}
    everywhere = Counter()
    for node, names in code.items():
        assert set(names) <= ex.LABELS, names  # every code event is an annotation of the catalogue
        assert names["append-received"] > 0 and names["apply"] > 0, (node, names)
        everywhere.update(names)
    for label in ("election-started", "became-leader", "stepped-down", "heartbeat-timeout", "replicate", "commit", "client-request", "truncate"):
        assert everywhere[label] > 0, (label, everywhere)
    assert everywhere["sticky-leader-kept-term"] == 0 and everywhere["stall-catchup-applied"] == 0  # no seeded bug
    assert everywhere["became-leader"] >= 4
