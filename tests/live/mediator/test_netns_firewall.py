"""The mediator in the gateway of a real netns run: faults on real traffic (root)."""

from __future__ import annotations

import itertools
import signal
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
    # (how soon a change is in effect, `applied_us`, is bench/bench_mediator_forwarding.py's)
    want = {("n1", "n2"): 0, ("n1", "n3"): 0, ("n2", "n1"): 0, ("n3", "n1"): 0, ("n2", "n3"): 20, ("n3", "n2"): 20}
    assert count_delivered(cluster, ALL_LINKS, expect=want) == want
    metrics = mediator.ok("GET", "/metrics")["firewall"]
    assert metrics["dropped"] == 80
    healed = mediator.ok("POST", "/firewall/heal", {})
    assert healed["affected"] == {"n1->n2": 20, "n1->n3": 20, "n2->n1": 20, "n3->n1": 20}
    assert all(v == 20 for v in count_delivered(cluster, ALL_LINKS).values())


def test_one_directed_link(cluster, mediator):
    mediator.ok("POST", "/firewall/drop", {"links": ["n2->n3"]})
    want = {link: 0 if link == ("n2", "n3") else 20 for link in ALL_LINKS}
    assert count_delivered(cluster, ALL_LINKS, expect=want) == want


def test_delay_adds_the_asked_time_to_the_rtt_and_keeps_order(cluster, mediator):
    # Every round trip crosses the delayed links, so each one takes at least their delays
    # (a busy machine only adds to that); the fastest one is well under a second more, or
    # the delay's unit is wrong. How close to the asked time it comes is measured by
    # bench/bench_mediator_forwarding.py.
    report = mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": 40})
    assert report["links"] == ["n1->n2"]
    delayed = udp_rtts(cluster, "n1", "n2", n=10)
    assert 40 <= min(delayed) < 40 + 500, delayed
    # Both directions delayed: the RTT grows by both delays.
    mediator.ok("POST", "/firewall/delay", {"links": ["n2->n1"], "ms": 20})
    both = udp_rtts(cluster, "n1", "n2", n=10)
    assert 60 <= min(both) < 60 + 500, both
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
    assert min(udp_rtts(cluster, "n1", "n2")) < 20  # no packet held any more
    assert mediator.ok("GET", "/metrics")["firewall"]["delayed"] >= 50


def test_duplication_produces_duplicates_at_the_receiver(cluster, mediator):
    mediator.ok("POST", "/firewall/duplicate", {"links": ["n1->n3"], "copies": 1})
    want = {("n1", "n3"): 50, ("n3", "n1"): 25}
    assert count_delivered(cluster, list(want), n=25, expect=want) == want
    assert mediator.ok("GET", "/metrics")["firewall"]["duplicated"] == 25


def test_killed_mediator_leaves_traffic_flowing_and_faults_stop(cluster, mediator):
    mediator.ok("POST", "/firewall/drop", {"links": ["n1->n2", "n2->n1"]})
    assert count_delivered(cluster, [("n1", "n2")], expect={("n1", "n2"): 0}) == {("n1", "n2"): 0}
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
    # The hold is long, so that the other link's round trips end well within it even on a
    # busy machine; a link held behind n1->n2 would take it whole.
    hold_s = 3.0
    mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": hold_s * 1000})
    rx, tx = udp_socket(cluster, "n2"), udp_socket(cluster, "n1")
    try:
        t0 = time.monotonic()
        for i in range(5):
            tx.sendto(b"%d" % i, rx.getsockname())
        udp_rtts(cluster, "n2", "n3", n=20)
        assert time.monotonic() - t0 < hold_s - 0.5, "n2<->n3 did not flow while n1->n2 held its packets"
        assert mediator.ok("GET", "/metrics")["firewall"]["held"] == 5
        rx.settimeout(hold_s + 10)
        got = [int(rx.recv(10)) for _ in range(5)]
        waited = time.monotonic() - t0
    finally:
        rx.close()
        tx.close()
    assert got == list(range(5)) and hold_s - 0.05 <= waited < hold_s + 10, waited
