"""raft-kv under the nemesis's disk faults (the preload shim, on a netns cluster):

* acknowledged writes survive every node crashing and losing what the shim saw unsynced
  (libraft's metadata and snapshot files, written through libc; its log segments are
  O_DSYNC kernel AIO writes, durable as written, so nothing of them is cut);
* an fsync error libraft cannot recover from makes it give the server up (state
  unavailable, for good): raft-kv then exits (fail-stop, code 3) instead of lingering as a
  process that serves nothing, and a restart brings it back;
* every error and delay fault of the nemesis reaches libraft's segment writes, the kernel
  AIO requests it makes through syscall(): the heal evidence counts calls the server hit,
  AIO requests among them, for each of disk:eio, enospc, fsync and slow; a node that a
  failed append stopped either gave up (fail-stop) or crashed inside libraft (SIGSEGV, a
  libraft 0.15 bug these faults find), and a restart brings it back.
"""

from __future__ import annotations

import errno
import random
import re
import threading
from pathlib import Path

import pytest

from mallory.errors import MalloryError
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

    try:
        wait_until(acknowledged, timeout, f"write {value} acknowledged")
    except MalloryError as exc:  # say how each node stood (seen once in CI, not understood yet)
        states = {node: _state(sut, node) for node in sut.backend.nodes}
        tails = "\n".join(f"--- {node}\n{rc.log_text(sut, node)[-1500:]}" for node in sut.backend.nodes)
        raise MalloryError(f"{exc}; nodes: {states}\n{tails}") from None


def _state(sut, node: str) -> object:
    """The node's STATUS, or why there is none."""
    if not sut.is_running(node):
        return "not running"
    try:
        return rc.status(sut, node)
    except (MalloryError, OSError) as exc:
        return f"no STATUS: {exc}"


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


def _keep_writing(sut, stop: threading.Event) -> None:
    """PUT one value after another through whichever node leads, until `stop`: every
    committed entry is an AIO segment write on every node that appends it."""
    value = 0
    while not stop.is_set():
        leaders = sut.primaries()
        if len(leaders) == 1:
            value += 1
            rc.ask(sut, leaders[0], f"PUT w {value}", timeout=1.0)
        else:
            stop.wait(0.1)


@pytest.mark.parametrize("spec", ["eio", "enospc", "fsync", "slow"])
def test_each_disk_fault_reaches_libraft_segment_writes(cluster, binary, spec: str) -> None:
    sut = rc.adapter(cluster, binary)
    controls = NodeControls(cluster.record, list(cluster.nodes)).prepare()
    sut.add_env_overlay(controls)
    ctx = FaultContext(backend=cluster, adapter=sut, controls=controls)
    disk = DiskFaults()
    assert disk.unsupported(ctx, spec) is None
    stop = threading.Event()
    writer = threading.Thread(target=_keep_writing, args=(sut, stop), daemon=True)
    try:
        start_all(sut)
        rc.wait_leader(sut, 20)
        writer.start()
        wait_until(lambda: int(rc.status(sut, rc.wait_leader(sut)).get("applied", 0)) > 20, 20, "writes committed")
        report = disk.enact(ctx, spec, random.Random(4))
        assert report.verified, report.evidence
        (node,) = report.nodes
        stop.wait(2.0)  # the node appends what the leader replicates (or leads and appends itself)
        disk.heal(ctx, report)
        hit = report.heal_evidence[node]
        assert hit["injected_by_sut"] > 0 and hit["injected_by_sut_aio"] > 0, hit
        if spec != "slow" and not sut.is_running(node):
            # A failed log write either gave it up (fail-stop), or crashed libraft itself: 0.15
            # dereferences a bad pointer in a uv callback after a failed segment append (about
            # half the ENOSPC runs here; a real libraft bug, which the crash oracle reports)
            log = rc.log_text(sut, node)
            crashed = re.search(r"==mallory== caught SIGSEGV.*\n==mallory== #\d+ \S+ \S*libraft\.so", log, re.S)
            assert "raft unavailable (" in log or crashed, log[-3000:]
            sut.start(node)
        for each in cluster.nodes:
            sut.wait_ready(each, 30)
        stop.set()
        writer.join(10)
        _write(sut, 7)
        assert rc.ask(sut, rc.wait_leader(sut), "GET r") == "OK 7"
    finally:
        stop.set()
        teardown_all(sut)
