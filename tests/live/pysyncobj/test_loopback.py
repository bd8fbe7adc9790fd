"""The pysyncobj KV service as three processes on loopback (no root): the line protocol,
a leader change after a kill, and its code events (annotations and traced pysyncobj
internals) in each node's real ring, named through the catalogue."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from mallory.instrument import toolchain
from mallory.instrument.catalogue import Catalogue
from mallory.observer.ring import RingReader, create_ring, unlink_ring
from mallory.polling import wait_until
from mallory.report.sources import sut_catalogue
from mallory.timeline.event import Kind
from tests.live.pysyncobj import kv_cluster as kv
from tests.live.stack import free_ports

pytestmark = pytest.mark.timeout(180)


class LoopbackCluster:
    """Three kv-node processes on 127.0.0.1, each with its own ring (MALLORY_SHM)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        ports = free_ports(6)
        self.client = ports[:3]
        self.peer = ports[3:]
        self.rings = [f"mallory-kvtest-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
        self.procs: list[subprocess.Popen | None] = [None] * 3
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
        self.env["MALLORY_RUNTIME_SO"] = str(toolchain.ensure_built().runtime_shared)
        for name in self.rings:
            create_ring(name, 1 << 18)

    def start(self, i: int) -> None:
        peers = ",".join(f"127.0.0.1:{p}" for j, p in enumerate(self.peer) if j != i)
        argv = [str(kv.SUT_DIR / "kv-node"), "--listen", "127.0.0.1", "--client-port", str(self.client[i]),
                "--peer-port", str(self.peer[i]), "--peers", peers, "--data", str(self.root / f"n{i}"),
                "--election-ms", "300"]
        with open(self.root / f"n{i}.log", "ab") as log:
            self.procs[i] = subprocess.Popen(argv, env={**self.env, "MALLORY_SHM": self.rings[i]},
                                             stdout=log, stderr=subprocess.STDOUT)

    def request(self, i: int, line: str) -> str:
        return kv.request("127.0.0.1", line, self.client[i])

    def leader(self, among: list[int]) -> int | None:
        views = {i: kv.status("127.0.0.1", self.client[i]) for i in among}
        agreed = {v.get("leader") for v in views.values()}
        found = [i for i, v in views.items() if v.get("role") == "leader"]
        return found[0] if len(agreed) == 1 and len(found) == 1 else None

    def wait_leader(self, among: list[int], what: str) -> int:
        # a list, so that leader 0 counts as found
        return wait_until(lambda: [i for i in [self.leader(among)] if i is not None], 30, what)[0]

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for name in self.rings:
            unlink_ring(name)


def drain(reader: RingReader) -> list:
    """Every event written so far (polling past a position a killed writer left unfinished)."""
    events: list = []
    wait_until(lambda: events.extend(reader.poll_events()) or reader.cursor >= reader.write_counter, 10, "the ring drained")
    return events


@pytest.fixture
def cluster(tmp_path):
    c = LoopbackCluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_protocol_failover_and_events_in_the_rings(cluster, tmp_path):
    names = {e.id: e.name for e in kv.catalogue(tmp_path)}
    written = kv.SUT_DIR / "kv-node.mallory.json"  # where `mallory report` finds it through the spec
    written.unlink(missing_ok=True)
    readers = [RingReader(name, node=f"n{i}") for i, name in enumerate(cluster.rings)]
    try:
        for i in range(3):
            cluster.start(i)
        first = cluster.wait_leader([0, 1, 2], "a leader")
        follower = (first + 1) % 3
        # every node serves every op (a follower forwards to the leader)
        assert cluster.request(follower, "PUT a 1") == "OK"
        assert cluster.request(first, "GET a") == "OK 1"
        assert cluster.request(follower, "CAS a 1 2") == "OK"
        assert cluster.request(first, "CAS a 1 3") == "FAIL mismatch"
        assert cluster.request(follower, "GET missing") == "OK nil"
        assert cluster.request(first, "APPEND l 5") == "OK" and cluster.request(follower, "APPEND l 6") == "OK"
        assert cluster.request(follower, "GET l") == "OK 5,6"
        assert cluster.request(first, "DROP a").startswith("ERR bad request")
        term = int(kv.status("127.0.0.1", cluster.client[first])["term"])

        cluster.procs[first].send_signal(signal.SIGKILL)  # the others elect a new leader, in a later term
        cluster.procs[first].wait(10)
        rest = [i for i in range(3) if i != first]
        second = cluster.wait_leader(rest, "a new leader")
        assert int(kv.status("127.0.0.1", cluster.client[second])["term"]) > term
        assert cluster.request(second, "GET a") == "OK 2"
        cluster.start(first)  # the restarted node replays its journal and rejoins
        wait_until(lambda: cluster.leader([0, 1, 2]) == second, 30, "the restarted node following")
        assert cluster.request(first, "GET a") == "OK 2"

        events = [drain(r) for r in readers]
        # a writer killed inside a hook leaves one position unfinished: the reader counts it lost
        assert [r.lost_total for i, r in enumerate(readers) if i != first] == [0, 0] and readers[first].lost_total <= 1
    finally:
        for r in readers:
            r.close()
    assert {e.id: e.name for e in Catalogue.load(written)} == names
    assert {e.id: e.name for e in sut_catalogue(str(kv.SPEC))} == names  # what `mallory report` loads
    counts = [Counter(names.get(e.id, f"unknown:{e.id}") for e in evs if e.kind in (Kind.FUNC, Kind.BLOCK)) for evs in events]
    for i, c in enumerate(counts):
        assert set(c) <= set(names.values()), (i, c)  # every event is in the catalogue
        assert c["raft-log-append"] > 0 and c["raft-apply"] >= 7 and c["apply-put"] >= 1, (i, c)
        assert c["apply-cas"] >= 2 and c["cas-mismatch"] >= 1 and c["apply-append"] >= 2, (i, c)
    assert counts[first]["raft-become-leader"] >= 1 and counts[second]["raft-become-leader"] >= 1
    assert counts[first]["raft-send-append-entries"] > 0 and counts[second]["raft-send-append-entries"] > 0
    third = 3 - first - second
    assert counts[third]["raft-append-response"] > 0  # a follower throughout the second term
    assert counts[follower]["client-request"] >= 4 and counts[first]["client-request"] >= 4
    assert counts[second]["raft-set-term"] >= 1 and counts[first]["role-changed"] >= 1
