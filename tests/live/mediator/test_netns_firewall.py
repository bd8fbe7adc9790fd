"""The mediator in the gateway of a real netns run: faults on real traffic (root)."""

from __future__ import annotations

import itertools
import signal
import statistics
import time
import uuid

import pytest

from mallory.cluster.netns import NetnsCluster
from mallory.cluster.registry import cleanup_run, load_run
from mallory.errors import MalloryError
from mallory.observer.sender import BatchSender
from mallory.timeline.event import ClockPair, Event, Kind
from tests.live.netns_helpers import (
    MediatorProcess,
    count_delivered,
    udp_rtts,
    udp_socket,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    name = f"med-{uuid.uuid4().hex[:6]}"
    c = NetnsCluster.up(name, 3, data_root=tmp_path_factory.mktemp("medrun"))
    yield c
    try:
        cleanup_run(load_run(name))
    except MalloryError:
        pass


@pytest.fixture
def mediator(cluster):
    m = MediatorProcess(cluster).start()
    m.ok("POST", "/firewall/heal", {})
    yield m
    if cluster.is_running(m.proc):
        m.kill(signal.SIGTERM)


ALL_LINKS = [(a, b) for a, b in itertools.permutations(["n1", "n2", "n3"], 2)]


def test_partition_stops_exactly_the_named_traffic_and_heal_restores_it(cluster, mediator):
    assert all(v == 20 for v in count_delivered(cluster, ALL_LINKS).values())
    report = mediator.ok("POST", "/firewall/drop", {"partition": [["n1"], ["n2", "n3"]]})
    assert sorted(report["links"]) == ["n1->n2", "n1->n3", "n2->n1", "n3->n1"]
    # In effect within a millisecond of the request reaching the firewall (the best of a
    # few changes, so one preemption on a loaded machine does not decide it).
    applied = [report["applied_us"]]
    for _ in range(3):
        applied.append(mediator.ok("POST", "/firewall/drop", {"links": ["n1->n2"]})["applied_us"])
    assert min(applied) < 1000, applied
    got = count_delivered(cluster, ALL_LINKS)
    assert got == {("n1", "n2"): 0, ("n1", "n3"): 0, ("n2", "n1"): 0, ("n3", "n1"): 0, ("n2", "n3"): 20, ("n3", "n2"): 20}
    metrics = mediator.ok("GET", "/metrics")["firewall"]
    assert metrics["dropped"] == 80
    healed = mediator.ok("POST", "/firewall/heal", {})
    assert healed["affected"] == {"n1->n2": 20, "n1->n3": 20, "n2->n1": 20, "n3->n1": 20}
    assert all(v == 20 for v in count_delivered(cluster, ALL_LINKS).values())


def test_one_directed_link(cluster, mediator):
    mediator.ok("POST", "/firewall/drop", {"links": ["n2->n3"]})
    got = count_delivered(cluster, ALL_LINKS)
    assert got[("n2", "n3")] == 0 and all(v == 20 for k, v in got.items() if k != ("n2", "n3"))


def test_delay_adds_the_asked_time_to_the_rtt_and_keeps_order(cluster, mediator):
    base = statistics.median(udp_rtts(cluster, "n1", "n2"))
    report = mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": 40})
    assert report["links"] == ["n1->n2"]
    delayed = statistics.median(udp_rtts(cluster, "n1", "n2", n=10))
    assert 38 <= delayed - base <= 60, (base, delayed)
    # Both directions delayed: the RTT grows by both delays.
    mediator.ok("POST", "/firewall/delay", {"links": ["n2->n1"], "ms": 20})
    both = statistics.median(udp_rtts(cluster, "n1", "n2", n=10))
    assert 58 <= both - base <= 85, (base, both)
    # In order per link: a burst under delay arrives in the order it was sent.
    rx, tx = udp_socket(cluster, "n2"), udp_socket(cluster, "n1")
    try:
        for i in range(50):
            tx.sendto(b"%d" % i, rx.getsockname())
        rx.settimeout(2)
        assert [int(rx.recv(10)) for _ in range(50)] == list(range(50))
    finally:
        rx.close()
        tx.close()
    healed = mediator.ok("POST", "/firewall/heal", {})
    assert sorted(healed["links"]) == ["n1->n2", "n2->n1"]
    assert statistics.median(udp_rtts(cluster, "n1", "n2")) < base + 10
    assert mediator.ok("GET", "/metrics")["firewall"]["delayed"] >= 50


def test_duplication_produces_duplicates_at_the_receiver(cluster, mediator):
    mediator.ok("POST", "/firewall/duplicate", {"links": ["n1->n3"], "copies": 1})
    got = count_delivered(cluster, [("n1", "n3"), ("n3", "n1")], n=25)
    assert got == {("n1", "n3"): 50, ("n3", "n1"): 25}
    assert mediator.ok("GET", "/metrics")["firewall"]["duplicated"] == 25


def test_killed_mediator_leaves_traffic_flowing_and_faults_stop(cluster, mediator):
    mediator.ok("POST", "/firewall/drop", {"links": ["n1->n2", "n2->n1"]})
    assert count_delivered(cluster, [("n1", "n2")])[("n1", "n2")] == 0
    mediator.kill(signal.SIGKILL)
    gw_rules = cluster.exec("gw", ["iptables-save"]).stdout
    assert "NFQUEUE" in gw_rules  # the killed mediator could not remove its rules...
    assert all(v == 20 for v in count_delivered(cluster, ALL_LINKS).values())  # ...bypass lets traffic through


def test_clean_stop_removes_the_queue_rules(cluster, mediator):
    mediator.kill(signal.SIGTERM)
    assert "NFQUEUE" not in cluster.exec("gw", ["iptables-save"]).stdout


def test_restarted_mediator_gets_batches_again(cluster, mediator):
    sender = BatchSender(ClockPair("n1", 5, time.time_ns()), (cluster.layout.gateway_control_address, 7101),
                         backoff_max=0.1).start()
    try:
        sender.submit([Event("n1", Kind.FUNC, 10, 1, "")], 20)
        assert sender.flush(5), sender.stats
        assert mediator.ok("GET", "/metrics")["ingest"]["nodes"]["n1"]["batches"] == 1
        mediator.kill(signal.SIGKILL)
        sender.submit([Event("n1", Kind.FUNC, 30, 2, "")], 40)
        mediator.start()
        assert sender.flush(10), sender.stats
        metrics = mediator.ok("GET", "/metrics")
        nodes = metrics["ingest"]["nodes"]
        assert nodes["n1"]["batches"] == 1 and nodes["n1"]["events"] == 1, (metrics, sender.stats)
        assert sender.stats.connects >= 2, sender.stats
    finally:
        sender.close()


def test_malformed_batches_and_requests_are_rejected_and_counted(cluster, mediator):
    import socket

    with socket.create_connection((cluster.layout.gateway_control_address, 7101), timeout=5) as conn:
        conn.sendall(b'{"clock":"n1","mono_ns":1,"real_ns":2}\n{"batch":"n1","seq":"zero","until_ns":1,"events":[]}\n')
        assert b"batch.seq" in conn.makefile("rb").readline()
    status, out = mediator.call("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": -5})
    assert status == 400 and "'ms'" in out["error"]
    m = mediator.ok("GET", "/metrics")
    assert m["receiver"]["rejected"] == 1 and m["api_rejected"] == 1
    assert all(v == 20 for v in count_delivered(cluster, [("n1", "n2")]).values())  # still forwarding


def test_held_packets_stay_held_while_other_links_flow(cluster, mediator):
    # Accepts on other links must not release held packets (no batch verdict may cover them).
    base = statistics.median(udp_rtts(cluster, "n2", "n3"))
    mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": 1000})
    rx, tx = udp_socket(cluster, "n2"), udp_socket(cluster, "n1")
    try:
        t0 = time.monotonic()
        for i in range(5):
            tx.sendto(b"%d" % i, rx.getsockname())
        other = statistics.median(udp_rtts(cluster, "n2", "n3", n=20))
        assert other < base + 10, (base, other)
        assert time.monotonic() - t0 < 0.8  # (else the next check proves nothing)
        assert mediator.ok("GET", "/metrics")["firewall"]["held"] == 5
        rx.settimeout(3)
        got = [int(rx.recv(10)) for _ in range(5)]
        waited = time.monotonic() - t0
    finally:
        rx.close()
        tx.close()
    assert got == list(range(5)) and 0.95 <= waited < 2.0, waited
