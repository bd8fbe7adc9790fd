"""The per-node observer on a real cluster: a 3-node pysyncobj (Raft) cluster is observed
packet for packet; a killed observer never blackholes the SUT; observers reconnect to a
restarted mediator. The mediator's side of the transport is its real BatchServer, in the
root namespace on the run's host address (observers reach it through the gateway)."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from mallory.cluster.netns import NetnsCluster
from mallory.mediator.receiver import BatchServer
from mallory.observer.keepalive import Keepalive
from mallory.polling import wait_until
from mallory.timeline.event import Batch, ClockPair, Kind

from .test_netns import CLIENT, ECHO, _wait_listening

RAFT_NODE = str(Path(__file__).with_name("raft_node.py"))
BATCH_PORT = 7191


class CollectingSink:
    """Keeps every clock pair and every batch (first copy of each (node, seq))."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clocks: dict[str, ClockPair] = {}
        self.clock_count = Counter()
        self.batches: dict[tuple[str, int], Batch] = {}

    def on_clock(self, clock: ClockPair) -> None:
        with self.lock:
            self.clocks[clock.node] = clock
            self.clock_count[clock.node] += 1

    def on_batch(self, batch: Batch, clock: ClockPair | None = None) -> None:
        with self.lock:
            self.batches.setdefault((batch.node, batch.seq), batch)

    def of(self, node: str) -> list[Batch]:
        with self.lock:
            return [b for (n, _), b in sorted(self.batches.items()) if n == node]

    def events(self, kind: Kind) -> list[tuple[str, int, str, int]]:
        """(node, id, data, ts) of every event of a kind."""
        with self.lock:
            return [(b.node, e.id, e.data, e.ts) for b in self.batches.values() for e in b.events if e.kind == kind]


def _start_observers(cluster: NetnsCluster, sink: CollectingSink, port: int, mode: str = "nfqueue",
                     extra: tuple[str, ...] = ()) -> dict:
    mediator = f"{cluster.layout.host_address}:{port}"
    procs = {
        node: cluster.spawn(
            node,
            [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run, "--mediator", mediator, "--mode", mode,
             *extra],
            name="observer",
        )
        for node in cluster.nodes
    }
    # The clock pair is sent after the rules are installed: from then on the node is observed.
    wait_until(lambda: set(sink.clocks) == set(cluster.nodes), 10, "every observer's clock pair")
    return procs


def _stop(cluster: NetnsCluster, procs) -> None:
    for proc in procs:
        cluster.signal(proc, signal.SIGTERM)
    for proc in procs:
        assert cluster.wait(proc, 10) == 0, proc.log_path.read_text()


def count_forwarded_tcp(cluster: NetnsCluster) -> None:
    """Count inter-node TCP segments at the gateway, ahead of any NFQUEUE rule (which ends the
    hook); `_forward_tcp_packets` reads the count."""
    cluster.exec("gw", ["iptables", "-w", "-N", "MALLORY-TEST-COUNT"])
    for a in cluster.layout.nodes:
        for b in cluster.layout.nodes:
            if a != b:
                cluster.exec("gw", ["iptables", "-w", "-A", "MALLORY-TEST-COUNT", "-s", a.address, "-d", b.address, "-p", "tcp"])
    cluster.exec("gw", ["iptables", "-w", "-I", "FORWARD", "1", "-j", "MALLORY-TEST-COUNT"])


def start_raft(cluster: NetnsCluster) -> list:
    """A pysyncobj Raft node on every node of the cluster."""
    addrs = {n.name: f"{n.address}:4321" for n in cluster.layout.nodes}
    return [
        cluster.spawn(name, [sys.executable, RAFT_NODE, addr, *[a for a in addrs.values() if a != addr]], name="raft")
        for name, addr in addrs.items()
    ]


def raft_agreed(rafts: list) -> bool:
    """Every node names the same leader and has applied at least 5 increments."""
    last = []
    for proc in rafts:
        lines = proc.log_path.read_text().splitlines()
        if not lines:
            return False
        last.append(json.loads(lines[-1]))
    leaders = {s["leader"] for s in last}
    return len(leaders) == 1 and None not in leaders and min(s["value"] for s in last) >= 5


def _forward_tcp_packets(cluster: NetnsCluster) -> int:
    out = cluster.exec("gw", ["iptables", "-w", "-nvxL", "MALLORY-TEST-COUNT"]).stdout
    return sum(int(line.split()[0]) for line in out.splitlines()[2:] if line.strip())


@pytest.mark.parametrize("mode", ["nfqueue", "nflog"])
def test_raft_cluster_is_observed_segment_for_segment(make_cluster, mode):
    cluster = make_cluster(3, "ob")
    lay = cluster.layout
    # Count, at the gateway, every TCP segment between two nodes (FORWARD sees them all).
    count_forwarded_tcp(cluster)

    sink = CollectingSink()
    server = BatchServer(lay.host_address, BATCH_PORT, sink).start()
    try:
        observers = _start_observers(cluster, sink, BATCH_PORT, mode)
        rafts = start_raft(cluster)
        wait_until(lambda: raft_agreed(rafts), 30, "a leader all three nodes agree on, and 5 replicated increments")
        for proc in rafts:
            cluster.signal(proc, signal.SIGKILL)
        for proc in rafts:
            cluster.wait(proc, 5)
        # the last segments (RSTs, FINs) cross, and both ends' observers report them
        wait_until(lambda: len(sink.events(Kind.SEND)) == len(sink.events(Kind.RECV)) == _forward_tcp_packets(cluster),
                   15, "the observers to report every segment the gateway forwarded")
        forwarded = _forward_tcp_packets(cluster)
        _stop(cluster, observers.values())
    finally:
        server.close()

    sends, recvs = sink.events(Kind.SEND), sink.events(Kind.RECV)
    assert forwarded > 50
    # Every segment the gateway forwarded was seen leaving its sender and entering its receiver.
    assert len(sends) == forwarded and len(recvs) == forwarded
    assert Counter((i, d) for _, i, d, _ in sends) == Counter((i, d) for _, i, d, _ in recvs)
    sent_by = {i: n for n, i, _, _ in sends}
    for node, ident, _, _ in recvs:
        assert sent_by[ident] != node
    # On the common time axis a segment arrives after it left (same machine: no skew).
    # NFQUEUE holds the packet until the sender's observer has stamped it, so that holds to
    # the clock pairs' precision; NFLOG copies are stamped when read, in any order, so only
    # within the scheduling delay (far below the timeline's 100 ms skew bound).
    slack = 1_000_000 if mode == "nfqueue" else 50_000_000
    sent_at = {i: sink.clocks[n].to_real(ts) for n, i, _, ts in sends}
    for node, ident, _, ts in recvs:
        assert sink.clocks[node].to_real(ts) >= sent_at[ident] - slack
    # Batches: seq 0.. without gaps; no event earlier than the previous batch's until_ns.
    for node in lay.names:
        batches = sink.of(node)
        assert [b.seq for b in batches] == list(range(len(batches)))
        assert sum(b.lost for b in batches) == 0
        for prev, cur in zip(batches, batches[1:]):
            assert cur.until_ns >= prev.until_ns
            assert all(e.ts >= prev.until_ns for e in cur.events)


def _echo_ok(cluster: NetnsCluster, src: str, dst: str, port: int) -> bool:
    result = cluster.exec(src, [sys.executable, "-c", CLIENT, cluster.node_address(dst), str(port)], check=False, timeout=10)
    return result.stdout.strip() == "HELLO"


def test_killed_observer_leaves_traffic_flowing(make_cluster):
    cluster = make_cluster(2, "kb")
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, BATCH_PORT + 1, sink).start()
    try:
        observers = _start_observers(cluster, sink, BATCH_PORT + 1)
        cluster.spawn("n2", [sys.executable, "-c", ECHO, "9000", "3"], name="echo")
        _wait_listening(cluster, "n2", 9000)
        assert _echo_ok(cluster, "n1", "n2", 9000)
        wait_until(lambda: len(sink.events(Kind.RECV)) >= 8, 5, "the first exchange observed")

        cluster.signal(observers["n2"], signal.SIGKILL)
        cluster.wait(observers["n2"], 5)
        assert "NFQUEUE" in cluster.exec("n2", ["iptables-save"]).stdout  # its rules stay...
        assert _echo_ok(cluster, "n1", "n2", 9000)  # ...and --queue-bypass lets traffic by

        cluster.signal(observers["n1"], signal.SIGKILL)
        cluster.wait(observers["n1"], 5)
        assert _echo_ok(cluster, "n1", "n2", 9000)
    finally:
        server.close()


BULK_SERVER = """
import socket, sys
s = socket.create_server(("0.0.0.0", int(sys.argv[1])))
c, _ = s.accept()
total = 0
while True:
    d = c.recv(65536)
    if not d:
        break
    total += len(d)
c.sendall(str(total).encode())
c.close()
"""
BULK_CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
s.sendall(b"x" * 200_000)
s.shutdown(socket.SHUT_WR)
print(s.recv(100).decode())
"""


def test_stalled_observer_fails_open(make_cluster):
    """A stopped observer holds at most a full queue of packets; past that the kernel lets
    packets through (FAIL_OPEN) instead of dropping them, so TCP retransmissions get by."""
    cluster = make_cluster(2, "fo")
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, BATCH_PORT + 5, sink).start()
    try:
        observer = cluster.spawn(
            "n2",
            [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run, "--queue-maxlen", "8",
             "--mediator", f"{cluster.layout.host_address}:{BATCH_PORT + 5}"],
            name="observer",
        )
        wait_until(lambda: "n2" in sink.clocks, 10, "the observer")
        cluster.spawn("n2", [sys.executable, "-c", BULK_SERVER, "9000"], name="bulk")
        _wait_listening(cluster, "n2", 9000)
        cluster.signal(observer, signal.SIGSTOP)
        # Fill the stopped observer's queue with UDP datagrams (they are queued too), so
        # the test does not wait for SYN retransmissions to fill it.
        fill = "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); [s.sendto(b'f',(sys.argv[1],9999)) for _ in range(20)]"
        cluster.exec("n1", [sys.executable, "-c", fill, cluster.node_address("n2")])
        result = cluster.exec(
            "n1", [sys.executable, "-c", BULK_CLIENT, cluster.node_address("n2"), "9000"], timeout=30, check=False
        )
        assert result.stdout.strip() == "200000", result.stderr
        cluster.signal(observer, signal.SIGCONT)
        cluster.signal(observer, signal.SIGTERM)
        assert cluster.wait(observer, 10) == 0
    finally:
        server.close()


def test_observer_removes_its_rules_on_sigterm(make_cluster):
    cluster = make_cluster(2, "rt")
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, BATCH_PORT + 2, sink).start()
    try:
        observers = _start_observers(cluster, sink, BATCH_PORT + 2)
        assert "MALLORY-OBS-IN" in cluster.exec("n1", ["iptables-save"]).stdout
        _stop(cluster, observers.values())
        assert "MALLORY-OBS" not in cluster.exec("n1", ["iptables-save"]).stdout
    finally:
        server.close()


def test_observers_reconnect_after_a_mediator_restart_and_lose_nothing(make_cluster):
    cluster = make_cluster(2, "rc")
    port = BATCH_PORT + 3
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, port, sink).start()
    observers = _start_observers(cluster, sink, port)
    cluster.spawn("n2", [sys.executable, "-c", ECHO, "9000", "2"], name="echo")
    _wait_listening(cluster, "n2", 9000)
    try:
        assert _echo_ok(cluster, "n1", "n2", 9000)
        wait_until(lambda: len(sink.events(Kind.RECV)) >= 8, 5, "the first exchange observed")
        server.close()
        time.sleep(0.3)
        assert _echo_ok(cluster, "n1", "n2", 9000)  # observed while the mediator is away
        time.sleep(0.5)

        restarted = CollectingSink()
        server = BatchServer(cluster.layout.host_address, port, restarted).start()
        wait_until(lambda: all(restarted.of(n) for n in cluster.nodes), 10, "batches from both observers after the restart")
        assert set(restarted.clocks) == set(cluster.nodes)  # the clock pair again, first
        time.sleep(0.5)
        _stop(cluster, observers.values())
    finally:
        server.close()
    total = {**sink.batches, **restarted.batches}
    for node in cluster.nodes:
        seqs = sorted(seq for n, seq in total if n == node)
        assert seqs == list(range(len(seqs)))  # nothing missing across the outage
        assert restarted.of(node)[0].seq > 0  # the sequence went on, it did not restart
    sends = [e for b in total.values() for e in b.events if e.kind == Kind.SEND]
    recvs = [e for b in total.values() for e in b.events if e.kind == Kind.RECV]
    assert len(sends) == len(recvs) >= 16  # two whole exchanges, each seen at both ends
    assert Counter(e.id for e in sends) == Counter(e.id for e in recvs)


def _write_ring(name: str, events: list[tuple[int, int, int]]) -> None:
    """Append (ts, id, kind) events to a ring the way one runtime writer does (RING.md:
    claim a position, fill the slot, publish its stamp). Single-threaded, for the test."""
    import mmap
    import struct

    from mallory.observer.ring import HEADER_SIZE, SLOT_SIZE, shm_path, slot_check

    with open(shm_path(name), "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
    try:
        capacity = struct.unpack_from("<Q", mm, 16)[0]
        for ts, ident, kind in events:
            pos = struct.unpack_from("<Q", mm, 64)[0]
            struct.pack_into("<Q", mm, 64, pos + 1)
            slot = HEADER_SIZE + (pos & (capacity - 1)) * SLOT_SIZE
            struct.pack_into("<QQII", mm, slot, ts, ident, kind, slot_check(ts, ident, kind, pos))
            struct.pack_into("<Q", mm, slot + 24, (pos + 1) << 1)  # after the payload, by itself
    finally:
        mm.close()


def test_restarted_observer_resumes_the_ring_where_its_predecessor_stopped(make_cluster):
    cluster = make_cluster(1, "rr")
    port = BATCH_PORT + 7
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, port, sink).start()
    mediator = f"{cluster.layout.host_address}:{port}"
    argv = [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run, "--mediator", mediator, "--peer", "10.255.255.1"]
    ring = cluster.shm_name("n1")
    try:
        first = cluster.spawn("n1", argv, name="observer")
        wait_until(lambda: Path("/dev/shm", ring.lstrip("/")).exists() and "n1" in sink.clocks, 10, "the first observer")
        now = time.monotonic_ns()
        _write_ring(ring, [(now + i, 1 + i, int(Kind.FUNC)) for i in range(10)])
        wait_until(lambda: sum(len(b.events) for b in sink.of("n1")) == 10, 5, "the first 10 events")
        _stop(cluster, [first])
        _write_ring(ring, [(now + 100 + i, 100 + i, int(Kind.BLOCK)) for i in range(10)])  # nobody reading
        restarted = CollectingSink()
        server.close()
        server = BatchServer(cluster.layout.host_address, port, restarted).start()
        second = cluster.spawn("n1", argv, name="observer")
        wait_until(lambda: sum(len(b.events) for b in restarted.of("n1")) >= 10, 10, "the events written in between")
        _stop(cluster, [second])
    finally:
        server.close()
    got = [e.id for b in restarted.of("n1") for e in b.events]
    assert got == list(range(100, 110))  # each event exactly once across the two observers
    assert sum(b.lost for b in restarted.of("n1")) == 0


def test_observer_drains_the_nodes_shm_ring(make_cluster):
    cluster = make_cluster(2, "rg")
    port = BATCH_PORT + 4
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, port, sink).start()
    try:
        observers = _start_observers(cluster, sink, port)
        ring = cluster.shm_name("n1")
        assert Path("/dev/shm", ring.lstrip("/")).exists()  # the observer created it
        now = time.monotonic_ns()
        written = [(now + i, 1000 + i, int(Kind.FUNC if i % 2 else Kind.BLOCK)) for i in range(500)]
        _write_ring(ring, written)
        wait_until(lambda: sum(len(b.events) for b in sink.of("n1")) >= 500, 5, "the ring's events at the mediator")
        _stop(cluster, observers.values())
    finally:
        server.close()
    got = [(e.ts, e.id, int(e.kind)) for b in sink.of("n1") for e in b.events]
    assert got == written
    assert sum(b.lost for b in sink.of("n1")) == 0
    assert not [e for b in sink.of("n2") for e in b.events]  # n2's ring stayed empty


def test_observer_buffer_is_bounded_and_counts_what_it_drops(make_cluster):
    """With the mediator away, an observer keeps at most --buffer-events events; the ones
    it had to drop arrive as `lost` once the mediator is back."""
    cluster = make_cluster(2, "bf")
    port = BATCH_PORT + 6
    mediator = f"{cluster.layout.host_address}:{port}"
    observers = [
        cluster.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run,
                             "--mediator", mediator, "--buffer-events", "4"], name="observer")
        for node in cluster.nodes
    ]
    wait_until(lambda: all("MALLORY-OBS-IN" in cluster.exec(n, ["iptables-save"]).stdout for n in cluster.nodes), 10,
          "the observers' rules")
    cluster.spawn("n2", [sys.executable, "-c", ECHO, "9000", "3"], name="echo")
    _wait_listening(cluster, "n2", 9000)
    for _ in range(3):
        assert _echo_ok(cluster, "n1", "n2", 9000)  # 3 exchanges: well over 4 events a node
    time.sleep(0.3)
    sink = CollectingSink()
    server = BatchServer(cluster.layout.host_address, port, sink).start()
    try:
        wait_until(lambda: all(sum(b.lost for b in sink.of(n)) > 0 for n in cluster.nodes), 10, "lost counts")
        _stop(cluster, observers)
    finally:
        server.close()
    for node in cluster.nodes:
        batches = sink.of(node)
        kept = sum(len(b.events) for b in batches)
        lost = sum(b.lost for b in batches)
        assert kept <= 4
        assert kept + lost >= 3 * 7  # an echo exchange is >= 7 segments through each node


UDP_COUNTER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: past rmem_max, no drops while descheduled
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(10.0)  # ten silent seconds end it too (a lost end mark)
n = 0
try:
    while s.recv(100) == b"d":
        n += 1
    s.settimeout(1.0)  # after the end mark: a datagram the stop put back in line behind it
    while True:
        n += s.recv(100) == b"d"
except socket.timeout:
    pass
print(n, flush=True)
"""
UDP_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
count, period = int(sys.argv[3]), 1.0 / float(sys.argv[4])
t = time.monotonic()
for i in range(count):
    s.sendto(b"d", (sys.argv[1], int(sys.argv[2])))
    t += period
    time.sleep(max(0.0, t - time.monotonic()))
s.sendto(b"e", (sys.argv[1], int(sys.argv[2])))
"""


def test_stopping_an_observer_drops_no_packet(make_cluster):
    """On SIGTERM the observer removes its rules, then reads what is still queued, then
    unbinds (unbinding a queue drops what is left in it): a stream crossing the stop loses
    nothing."""
    cluster = make_cluster(2, "st")
    sink = CollectingSink()
    port = BATCH_PORT + 8
    server = BatchServer(cluster.layout.host_address, port, sink).start()
    try:
        observers = _start_observers(cluster, sink, port)
        counter = cluster.spawn("n2", [sys.executable, "-c", UDP_COUNTER, "9500"], name="counter")
        _wait_listening(cluster, "n2", 9500, udp=True)
        sender = cluster.spawn("n1", [sys.executable, "-c", UDP_SENDER, cluster.node_address("n2"), "9500", "6000", "2000"],
                               name="sender")
        # mid-stream: once the observers have reported a part of the 3 s stream
        wait_until(lambda: len(sink.events(Kind.RECV)) >= 500, 30, "the observers to see the stream")
        _stop(cluster, observers.values())
        observed = len(sink.events(Kind.RECV))
        assert cluster.wait(sender, 30) == 0
        assert cluster.wait(counter, 30) == 0
    finally:
        server.close()
    assert counter.log_path.read_text().split() == ["6000"]
    assert observed < 6000, "the observers were stopped after the stream, not during it"


def test_an_observer_cut_off_without_a_word_is_dropped_by_keepalive_and_a_stopped_one_is_kept(make_cluster):
    """The mediator's Keepalive (mallory/observer/keepalive.py) ends the connection of an
    observer whose packets are all lost (as when its namespace or veth vanishes without a
    FIN or RST) within `dead_after_s`, with ETIMEDOUT; an observer that is stopped, quiet for as long,
    keeps its connection (its kernel answers the probes); and the cut-off one, once its
    packets flow again, reconnects and loses no batch."""
    cluster = make_cluster(2, "ka")
    sink = CollectingSink()
    port = BATCH_PORT + 9
    keepalive = Keepalive(idle_s=2, interval_s=1, probes=3)  # dead after 5 s
    server = BatchServer(cluster.layout.host_address, port, sink, keepalive=keepalive).start()
    cut = [["INPUT", "--sport"], ["OUTPUT", "--dport"]]
    try:
        observers = _start_observers(cluster, sink, port)
        assert server.metrics()["open_connections"] == 2
        cluster.signal(observers["n1"], signal.SIGSTOP)
        for chain, match in cut:
            cluster.exec("n2", ["iptables", "-w", "-I", chain, "1", "-p", "tcp", match, str(port), "-j", "DROP"])
        silent_at = time.monotonic()
        wait_until(lambda: server.metrics()["ended"], keepalive.dead_after_s + 10, "the cut-off observer's connection to end")
        took = time.monotonic() - silent_at
        assert keepalive.dead_after_s - 1 <= took <= keepalive.dead_after_s + 3, took
        time.sleep(keepalive.dead_after_s)  # the stopped one has been quiet for twice as long now
        metrics = server.metrics()
        assert metrics["ended"] == {"ETIMEDOUT": 1} and metrics["open_connections"] == 1

        cluster.signal(observers["n1"], signal.SIGCONT)
        n1_batches = len(sink.of("n1"))
        wait_until(lambda: len(sink.of("n1")) > n1_batches + 5, 10, "the stopped observer to send again")
        for chain, match in cut:
            cluster.exec("n2", ["iptables", "-w", "-D", chain, "-p", "tcp", match, str(port), "-j", "DROP"])
        # its next retransmission meets the mediator's RST: it reconnects and resends
        wait_until(lambda: sink.clock_count["n2"] == 2, 60, "the cut-off observer to reconnect")
        n2_batches = len(sink.of("n2"))
        wait_until(lambda: len(sink.of("n2")) > n2_batches + 5, 10, "the reconnected observer's batches")
        assert sink.clock_count["n1"] == 1  # never reconnected
        _stop(cluster, observers.values())
    finally:
        server.close()
    for node in cluster.nodes:
        seqs = [b.seq for b in sink.of(node)]
        assert seqs == list(range(len(seqs)))


def test_a_mediator_cut_off_without_a_word_is_dropped_by_the_observers_keepalive(make_cluster):
    """The observer's sender sets a Keepalive (mallory/observer/keepalive.py; `mallory observe
    --keepalive`, 5 s here, 40 s by default) on its connection: when nothing from the
    mediator reaches an observer any more (its acks and TCP's all lost, as when the
    mediator's host vanishes without a FIN or RST), the observer ends its connection by
    itself `dead_after_s` after its first unanswered batch, with ETIMEDOUT, while the
    mediator (given a far longer keepalive here) has ended nothing; once the path is back it
    reconnects and resends, and no batch is lost."""
    cluster = make_cluster(2, "mk")
    sink = CollectingSink()
    port = BATCH_PORT + 10
    patient = Keepalive(idle_s=600, interval_s=60, probes=5)  # the mediator's side ends nothing here
    short = Keepalive(idle_s=2, interval_s=1, probes=3)  # the observers' (--keepalive 2,1,3)
    server = BatchServer(cluster.layout.host_address, port, sink, keepalive=patient).start()
    mediator = f"{cluster.layout.host_address}:{port}"
    cut = ["INPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP"]  # n2's batches go, nothing comes back

    def connected() -> bool:
        return bool(cluster.exec("n2", ["ss", "-Htn", "state", "established", "dst", mediator]).stdout.strip())

    try:
        observers = _start_observers(cluster, sink, port, extra=("--keepalive", "2,1,3"))
        assert connected()
        cluster.exec("n2", ["iptables", "-w", "-I", cut[0], "1", *cut[1:]])
        silent_at = time.monotonic()
        wait_until(lambda: not connected(), short.dead_after_s + 15, "the observer to end its connection",
                   interval=0.5)
        took = time.monotonic() - silent_at
        assert short.dead_after_s - 1 <= took <= short.dead_after_s + 5, took
        assert server.metrics()["ended"] == {}  # the observer's doing: the mediator heard no word
        assert sink.clock_count["n2"] == 1  # no new connection while cut off (the SYN-ACK is lost)

        cluster.exec("n2", ["iptables", "-w", "-D", *cut])
        wait_until(lambda: sink.clock_count["n2"] == 2, 15, "the observer to reconnect")
        n2_batches = len(sink.of("n2"))
        wait_until(lambda: len(sink.of("n2")) > n2_batches + 5, 10, "the reconnected observer's batches")
        assert sink.clock_count["n1"] == 1  # never reconnected
        _stop(cluster, observers.values())
        assert "ended: ETIMEDOUT 1" in observers["n2"].log_path.read_text()  # its final line
    finally:
        server.close()
    for node in cluster.nodes:
        seqs = [b.seq for b in sink.of(node)]
        assert seqs == list(range(len(seqs)))
