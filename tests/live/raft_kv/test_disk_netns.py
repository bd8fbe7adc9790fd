"""raft-kv under the nemesis's disk faults (the preload shim, on a netns cluster):

* acknowledged writes survive every node crashing and losing what the shim saw unsynced
  (libraft's metadata and snapshot files, written through libc; its log segments go
  through kernel AIO, io_submit with RWF_DSYNC, which a preload shim cannot see: they are
  synced by the kernel as written, and no fault of the shim reaches them);
* an fsync error libraft cannot recover from makes it give the server up (state
  unavailable, for good): raft-kv then exits (fail-stop, code 3) instead of lingering as a
  process that serves nothing, and a restart brings it back.
"""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from mallory.harness.session import start_all, teardown_all
from mallory.polling import wait_until
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import MODE_ERROR, MODE_OFF, OP_SYNC, NodeControls
from nemesis.faults.disk import DiskFaults, data_prefix
from tests.live.raft_kv import raft_cluster as rc

pytestmark = pytest.mark.timeout(240)


def _write(sut, value: int, timeout: float = 20.0) -> None:
    """An acknowledged PUT r value, through whichever node leads."""

    def acknowledged() -> bool:
        leaders = sut.primaries()
        return len(leaders) == 1 and rc.ask(sut, leaders[0], f"PUT r {value}") == "OK"

    wait_until(acknowledged, timeout, f"write {value} acknowledged")


def test_unsynced_writes_lost_and_fsync_errors(cluster, binary, tmp_path: Path) -> None:
    sut = rc.adapter(cluster, binary)
    controls = NodeControls(cluster.record, list(cluster.nodes)).prepare()
    sut.add_env_overlay(controls)
    ctx = FaultContext(backend=cluster, adapter=sut, controls=controls)
    nodes = list(cluster.nodes)
    try:
        for node in nodes:
            controls.set_tracking(node, data_prefix(ctx, node))
        start_all(sut)
        for value in (1, 2, 3):
            _write(sut, value)

        disk = DiskFaults()
        rng = random.Random(0)
        reports = [disk.enact(ctx, "lose-unsynced", rng) for _ in nodes]  # each crashes a running node
        assert sorted(n for r in reports for n in r.nodes) == sorted(nodes), "every node crashed once"
        assert all(r.verified for r in reports)
        for report in reports:
            disk.heal(ctx, report)
        for node in nodes:
            sut.wait_ready(node, 30)
        leader = rc.wait_leader(sut, 20)
        assert rc.ask(sut, leader, "GET r") == "OK 3", "an acknowledged write was lost"

        # fsync fails on a follower; the leader dies: the follower must persist a new term
        # (its vote or its candidacy), cannot, and libraft gives it up
        follower = next(n for n in nodes if n != leader)
        proc = sut.process(follower)
        assert proc is not None
        controls.set_disk(follower, prefix=data_prefix(ctx, follower), mode=MODE_ERROR, err=errno.EIO, ops=OP_SYNC)
        sut.kill(leader)
        wait_until(lambda: not sut.is_running(follower), 30, f"{follower} to fail-stop after fsync errors")
        assert cluster.wait(proc, 5) == 3
        assert "raft unavailable (" in rc.log_text(sut, follower)
        assert controls.disk_state(follower).injected > 0

        controls.set_disk(follower, MODE_OFF)
        for node in (leader, follower):
            sut.start(node)
        for node in nodes:
            sut.wait_ready(node, 30)
        _write(sut, 4)
        assert rc.ask(sut, rc.wait_leader(sut), "GET r") == "OK 4"
    finally:
        teardown_all(sut)
