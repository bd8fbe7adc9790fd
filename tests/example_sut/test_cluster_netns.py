"""The example SUT as the fuzzer sees it: a 3-node netns cluster with an observer in every
node and the mediator in the gateway. It elects a leader, the register workload (through
the gateway) checks linearizable, kill / pause / partition each leave it able to serve
again once healed, and the mediator's recording holds the nodes' packets and their
annotated code events by name."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from mallory.polling import wait_until
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import RegisterWorkload
from mallory.observer.catalogue import Catalogue, catalogue_path
from mallory.oracles.history import read_history
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.logs import scan_log
from mallory.oracles.models import CasRegister
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind
from tests.example_sut import example_cluster as ex

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]


def _workload(sut, out: Path, seconds: float) -> int:
    """The register workload on key 0 for `seconds`; checked from the value it starts with."""
    reply = ex.request(sut.backend.client_address(ex.wait_leader(sut)), "GET 0")
    assert reply.startswith("OK ")
    initial = None if reply == "OK nil" else int(reply[3:])
    summary = record_run(sut, RegisterWorkload(), RunConfig(concurrency=3, time_limit=seconds, rate=150), out)
    _, history = read_history(out / "history.edn")
    result = check_linearizable(history, CasRegister(initial))
    assert result.valid is True, result.explanation
    return summary.completions["ok"]


def _serves(sut, value: int) -> str:
    """Write `value` through the one leader and read it back; the leader."""
    leader = ex.wait_leader(sut, 15)
    address = sut.backend.client_address(leader)
    assert ex.request(address, f"PUT r {value}") == "OK"
    assert ex.request(address, "GET r") == f"OK {value}"
    return leader


def test_observed_cluster_survives_kill_pause_and_partition(cluster, binary, tmp_path: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(binary))
    mediator_proc, mediator = ex.start_mediator(cluster, tmp_path / "rec")
    observers = ex.start_observers(cluster)
    wait_until(
        lambda: all(mediator.metrics()["ingest"]["nodes"].get(n, {}).get("batches", 0) > 0 for n in cluster.nodes),
        20,
        "batches from every observer (each has created its node's ring)",
    )
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
