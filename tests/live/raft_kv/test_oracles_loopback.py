"""The schedule checks' consensus oracles on a real raft-kv cluster (loopback, no root),
each schedule scripted as the campaign loop runs one: the workload starts, faults are
enacted and healed (`faults_healed`), the nemesis resets the cluster, the checks run.

* a healthy schedule (the leader killed, a new one elected, the node restarted) finds
  nothing: the replicas' hash chains agree, no term had two leaders, every node came
  back, clients were served again right after the heal;
* a node whose raft metadata is corrupt while it is down cannot start again (libraft
  refuses the file): the reset brings back every node but that one, and the checks find
  it (`cannot-restart`, with its last log lines);
* two of three nodes that cannot start leave the third without a quorum: no client op
  succeeds after the heal (`stuck`), and no single node is blamed;
* a node that crashes (SIGSEGV) during the schedule, which the reset restarts, is a bug
  whose report holds the crashed process's last log lines (not its successor's) and the
  backtrace the fault shim wrote, symbolized down to raft-kv's main.
"""

from __future__ import annotations

import json
import random
import signal
import struct
from pathlib import Path

import pytest

from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.cluster.registry import RunRecord
from mallory.harness.runner import RunConfig
from mallory.harness.session import start_all, teardown_all
from mallory.polling import wait_until
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import NodeControls
from nemesis.nemesis import Nemesis
from tests.live.raft_kv import raft_cluster as rc
from tests.live.stack import free_ports, loopback_with_rings

pytestmark = pytest.mark.timeout(240)

#: a libraft metadata file of an unknown format version: raft_init refuses it
CORRUPT_METADATA = struct.pack("<QQQQ", 99, 1, 1, 0)


@pytest.fixture
def cluster(binary: Path, tmp_path: Path):
    """A started 3-node raft-kv on loopback with the fault shim preloaded, the nemesis that
    resets it, and the checks of a campaign directory (stuck after 10 s), as `mallory fuzz`
    wires them."""
    with loopback_with_rings() as backend:
        sut = rc.adapter(backend, binary, ports=tuple(free_ports(2)))
        record = RunRecord("oracles", 0, tmp_path / "state", tmp_path / "run")
        record.state_dir.mkdir(parents=True)
        sut.add_env_overlay(NodeControls(record, list(backend.nodes)).prepare())
        directory = CampaignDir(tmp_path / "campaign")
        directory.create(CampaignConfig(sut="raft-kv", seed=1, workload="list-append"))
        checks = ScheduleChecks(sut, directory, "list-append", RunConfig(concurrency=3, rate=100, seed=1),
                                stuck_after_s=10.0, leader_line=sut.leader_line)
        nemesis = Nemesis(FaultContext(backend=backend, adapter=sut, ready_timeout=15.0), enabled=["kill"])
        try:
            start_all(sut)
            rc.wait_leader(sut)
            yield sut, nemesis, checks
        finally:
            checks.close()
            teardown_all(sut)


def _served(checks: ScheduleChecks, index: int) -> int:
    """Client ops of schedule `index` that completed ok so far (its history.jsonl)."""
    path = checks.dir.run_dir(index) / "history.jsonl"
    complete = path.read_text().split("\n")[:-1] if path.exists() else []  # the last line may be half written
    return sum(json.loads(line)["type"] == "ok" for line in complete)


def _schedule(sut, nemesis: Nemesis, checks: ScheduleChecks, index: int, faults) -> tuple[list, dict]:
    """One scripted schedule: the workload serves a while, `faults(sut)` acts, every fault
    is healed, the nemesis resets the cluster, the checks run. Its evidence and record."""
    checks.begin_schedule(index)
    wait_until(lambda: _served(checks, index) > 10, 20, "the workload served")
    faults(sut)
    checks.faults_healed()
    record = {"index": index, "reset": nemesis.reset().to_json()}
    return checks.check_schedule(index, record), record


def _corrupt_metadata(sut, node: str) -> None:
    """Kill the node and give it raft metadata libraft cannot read."""
    sut.kill(node)
    for name in ("metadata1", "metadata2"):
        (sut.backend.data_dir(node) / name).write_bytes(CORRUPT_METADATA)


def test_a_healthy_schedule_finds_nothing(cluster) -> None:
    sut, nemesis, checks = cluster

    def kill_the_leader(sut) -> None:
        report = nemesis.enact("kill:primaries", random.Random(1))
        assert report.verified and report.nodes
        rc.wait_leader(sut, 20, among=[n for n in sut.backend.nodes if n not in report.nodes])
        nemesis.heal(report)

    evidence, record = _schedule(sut, nemesis, checks, 0, kill_the_leader)
    assert evidence == [], [e.report for e in evidence]
    assert record["reset"]["healthy"] and record["reset"]["unready"] == {}
    assert len(record["replicas"]) >= 2  # replicas compared (a just restarted one may not have applied yet)
    assert record["checks"]["served"] > 10


def test_a_node_that_cannot_start_again_is_found_with_its_last_lines(cluster) -> None:
    sut, nemesis, checks = cluster
    victim = next(n for n in sut.backend.nodes if n not in sut.primaries())
    evidence, record = _schedule(sut, nemesis, checks, 0, lambda sut: _corrupt_metadata(sut, victim))
    assert record["reset"]["unready"][victim]["how"] == "exited"
    (found,) = [e for e in evidence if e.report["oracle"] == "liveness"]
    assert found.report["kind"] == "cannot-restart" and found.report["node"] == victim
    # libraft reads its metadata in raft_init: raft-kv's own last words say so
    assert any(line.startswith("raft-kv: raft_init: ") for line in found.report["details"]["last_log_lines"])
    assert not [e for e in evidence if e.report["kind"] == "stuck"]  # the other two served on


def test_a_cluster_without_quorum_after_the_heal_is_stuck(cluster) -> None:
    sut, nemesis, checks = cluster
    leader = sut.primaries()[0]
    doomed = [n for n in sut.backend.nodes if n != leader]

    def lose_a_quorum(sut) -> None:
        for node in doomed:
            _corrupt_metadata(sut, node)

    evidence, record = _schedule(sut, nemesis, checks, 0, lose_a_quorum)
    assert set(doomed) <= set(record["reset"]["unready"])  # the survivor, alone, never gets ready either
    kinds = [e.report["kind"] for e in evidence if e.report["oracle"] == "liveness"]
    assert kinds == ["stuck"]  # two nodes down: the cluster's state, no one node to blame


def test_a_crash_the_reset_restarted_is_a_bug_with_its_last_lines_and_backtrace(cluster) -> None:
    sut, nemesis, checks = cluster
    victim = next(n for n in sut.backend.nodes if n not in sut.primaries())

    def crash(sut) -> None:
        proc = sut.process(victim)
        sut.backend.signal(proc, signal.SIGSEGV)
        assert sut.backend.wait(proc, 10) == -signal.SIGSEGV  # the shim's handler re-raised it

    evidence, record = _schedule(sut, nemesis, checks, 0, crash)
    assert record["reset"]["exited"][victim]["status"] == -signal.SIGSEGV and victim in record["reset"]["restarted"]
    (death,) = [e for e in evidence if e.report["oracle"] == "signal"]
    assert death.report["node"] == victim and death.report["kind"] == "killed-by-SIGSEGV"
    details = death.report["details"]
    assert details["last_log_lines"] and not any("started: id" in line for line in details["last_log_lines"][-3:])
    where = [frame.get("where") or "" for frame in details["backtrace"]]
    assert any(w.startswith("main at ") and "raft_kv.c:" in w for w in where), details["backtrace"]  # built -g
