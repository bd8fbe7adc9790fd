"""End to end on a real cluster: a 3-node pysyncobj (Raft) cluster in a netns run, an
observer on every node and `mallory mediator` in the gateway. Every inter-node TCP segment
is a SEND on its sender's observer, a packet the mediator forwards, and a RECV on its
receiver's observer, all with one id, and the mediator's timeline commits them linked."""

from __future__ import annotations

import http.client
import json
import signal
import sys
import time
from collections import Counter

import orjson

from mallory.cluster.netns import NetnsCluster
from mallory.polling import wait_until
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind

from .test_observer import (
    _forward_tcp_packets,
    count_forwarded_tcp,
    raft_agreed,
    start_raft,
)

TOKEN = "e2e-token"
API_PORT = 7100


def api_get(cluster: NetnsCluster, path: str) -> dict:
    conn = http.client.HTTPConnection(cluster.layout.gateway_control_address, API_PORT, timeout=5)
    try:
        conn.request("GET", path, headers={"X-Mallory-Token": TOKEN})
        response = conn.getresponse()
        body = orjson.loads(response.read())
        assert response.status == 200, body
        return body
    finally:
        conn.close()


def start_mediator(cluster: NetnsCluster, record_dir):
    ready = cluster.data_dir("gw") / "ready"
    ready.unlink(missing_ok=True)
    proc = cluster.spawn(
        "gw",
        [sys.executable, "-m", "mallory.cli", "mediator", "--run", cluster.run,
         "--ready-file", str(ready), "--record", str(record_dir)],
        name="mediator",
        env={"MALLORY_TOKEN": TOKEN},
    )
    wait_until(ready.exists, 20, "the mediator")
    return proc


def test_raft_cluster_observed_by_observers_and_mediator(make_cluster, tmp_path):
    cluster = make_cluster(3, "e2e")
    mediator = start_mediator(cluster, tmp_path / "rec")
    count_forwarded_tcp(cluster)

    observers = [
        cluster.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run], name="observer")
        for node in cluster.nodes
    ]
    wait_until(
        lambda: all(api_get(cluster, "/metrics")["ingest"]["nodes"].get(n, {}).get("batches", 0) > 0 for n in cluster.nodes),
        15,
        "batches from every observer at the mediator",
    )
    rafts = start_raft(cluster)
    wait_until(lambda: raft_agreed(rafts), 30, "a leader and 5 replicated increments")
    for proc in rafts:
        cluster.signal(proc, signal.SIGKILL)
    for proc in rafts:
        cluster.wait(proc, 5)
    time.sleep(0.5)
    forwarded = _forward_tcp_packets(cluster)
    for proc in observers:
        cluster.signal(proc, signal.SIGTERM)
    for proc in observers:
        assert cluster.wait(proc, 10) == 0

    def recorded_events() -> list:
        with open(tmp_path / "rec" / "events.jsonl", "rb") as f:
            batches = [r for r in read_records(f) if isinstance(r, Batch)]
        return [e for b in batches for e in b.events if e.node in cluster.nodes]

    def sends_and_recvs(events: list) -> tuple[Counter, Counter]:
        return Counter(e.id for e in events if e.kind == Kind.SEND), Counter(e.id for e in events if e.kind == Kind.RECV)

    # The observers sent their last batches before exiting; the mediator records each as it
    # ingests it, the metrics counted under the same lock.
    wait_until(lambda: min(sum(c.values()) for c in sends_and_recvs(recorded_events())) >= forwarded, 10,
               "every SEND and RECV recorded")
    metrics = api_get(cluster, "/metrics")
    cluster.signal(mediator, signal.SIGTERM)
    assert cluster.wait(mediator, 10) == 0

    assert forwarded > 50
    assert metrics["firewall"]["seen"] == forwarded  # the mediator saw every segment
    events = recorded_events()
    sends, recvs = sends_and_recvs(events)
    assert sum(sends.values()) == forwarded and sends == recvs
    ingest = metrics["ingest"]
    for node in cluster.nodes:
        stats = ingest["nodes"][node]
        mine = sum(1 for e in events if e.node == node and e.kind in (Kind.SEND, Kind.RECV))
        assert stats["joined"] == mine and stats["unjoined"] == 0, (node, stats)  # same ids as the mediator's
        assert stats["lost"] == 0
    # The timeline committed every observed segment with its RECV linked to its SEND.
    assert ingest["unmatched_recvs"] == 0
    assert ingest["committed"] >= 2 * forwarded


def _raft_value(proc) -> int:
    lines = proc.log_path.read_text().splitlines()
    return json.loads(lines[-1])["value"] if lines else -1


def test_killed_mediator_leaves_raft_running_and_observers_reconnect_to_a_new_one(make_cluster, tmp_path):
    cluster = make_cluster(3, "mr")
    mediator = start_mediator(cluster, tmp_path / "rec1")
    observers = [
        cluster.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run], name="observer")
        for node in cluster.nodes
    ]
    rafts = start_raft(cluster)
    wait_until(lambda: min(_raft_value(p) for p in rafts) >= 3, 30, "Raft replicating")

    cluster.signal(mediator, signal.SIGKILL)
    cluster.wait(mediator, 5)
    before = min(_raft_value(p) for p in rafts)
    wait_until(lambda: min(_raft_value(p) for p in rafts) >= before + 5, 15, "Raft replicating without a mediator")

    mediator = start_mediator(cluster, tmp_path / "rec2")

    def batches_from_all() -> bool:
        nodes = api_get(cluster, "/metrics")["ingest"]["nodes"]
        return all(nodes.get(n, {}).get("batches", 0) >= 5 and nodes[n]["events"] > 0 for n in cluster.nodes)

    wait_until(batches_from_all, 15, "every observer's batches at the restarted mediator")
    wait_until(lambda: api_get(cluster, "/metrics")["firewall"]["seen"] > 0, 10, "the new firewall in the path")
    for proc in [*rafts, *observers]:
        cluster.signal(proc, signal.SIGKILL)
    cluster.signal(mediator, signal.SIGTERM)
    assert cluster.wait(mediator, 10) == 0


def test_bulk_tcp_segments_have_one_id_at_all_three_vantage_points(make_cluster, tmp_path):
    """A bulk transfer makes TCP build GSO super-packets at the sender's OUTPUT hook; the
    observer's queue segments them, so the sender, the mediator and the receiver still see
    the same wire segments, one id each."""
    from .test_observer import BULK_CLIENT, BULK_SERVER

    cluster = make_cluster(2, "bk")
    mediator = start_mediator(cluster, tmp_path / "rec")
    observers = [
        cluster.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run], name="observer")
        for node in cluster.nodes
    ]
    wait_until(
        lambda: all(api_get(cluster, "/metrics")["ingest"]["nodes"].get(n, {}).get("batches", 0) > 0 for n in cluster.nodes),
        15,
        "every observer",
    )
    cluster.spawn("n2", [sys.executable, "-c", BULK_SERVER, "9000"], name="bulk")
    time.sleep(0.5)
    result = cluster.exec("n1", [sys.executable, "-c", BULK_CLIENT.replace("200_000", "3_000_000"),
                                 cluster.node_address("n2"), "9000"], timeout=60)
    assert result.stdout.strip() == "3000000"
    time.sleep(0.5)
    for proc in observers:
        cluster.signal(proc, signal.SIGTERM)
    for proc in observers:
        assert cluster.wait(proc, 10) == 0
    time.sleep(0.5)
    metrics = api_get(cluster, "/metrics")
    cluster.signal(mediator, signal.SIGTERM)
    cluster.wait(mediator, 10)

    with open(tmp_path / "rec" / "events.jsonl", "rb") as f:
        events = [e for r in read_records(f) if isinstance(r, Batch) for e in r.events if e.node in cluster.nodes]
    sends = Counter(e.id for e in events if e.kind == Kind.SEND)
    recvs = Counter(e.id for e in events if e.kind == Kind.RECV)
    assert sum(sends.values()) >= 3_000_000 // 1448  # at least one event per full-size segment
    assert sends == recvs
    assert metrics["firewall"]["seen"] == sum(sends.values())
    # The mediator joins an observer's event with its own packet record when the batch
    # arrives, and a batch can race ahead of a firewall backlogged by the bulk stream (seen
    # on this busy machine: up to ~2% of a node's events unjoined), which says nothing
    # about ids. Had the mediator computed other ids for the segments (90% of the events
    # here), nearly all would be unjoined.
    for node in cluster.nodes:
        stats = metrics["ingest"]["nodes"][node]
        assert stats["unjoined"] <= stats["events"] // 10, (node, stats)
