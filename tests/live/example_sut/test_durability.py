"""Acknowledged writes survive a crash that loses every unsynced write on every node.

Mallory's own campaigns found this bug in the example SUT: it persisted its log with fclose +
rename and never fsync'd, so `disk:lose-unsynced` (the nemesis kills the node's SUT and cuts
its files back to what was fsync'd) made restarted nodes forget committed entries. Here all
three nodes lose their unsynced writes, one after the other, after three acknowledged writes:
the register must still read the last one, and the history must be linearizable.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from mallory.harness.history import HistoryRecorder
from mallory.harness.session import start_all
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import NodeControls
from nemesis.faults.disk import DiskFaults, data_prefix
from tests.live.example_sut import example_cluster as ex
from tests.live.example_sut.test_seeded_bugs import Driver, linearizable, ok_read

pytestmark = pytest.mark.timeout(240)


def acknowledged_write(driver: Driver, nodes: list[str], value: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            if driver.op(node, "write", value).type == "ok":
                return
        time.sleep(0.2)
    raise AssertionError(f"write {value} was never acknowledged")


def test_acknowledged_writes_survive_losing_every_unsynced_write(cluster, binary, tmp_path: Path) -> None:
    sut = ex.adapter(cluster, binary)
    controls = NodeControls(cluster.record, list(cluster.nodes)).prepare()
    sut.add_env_overlay(controls)
    ctx = FaultContext(backend=cluster, adapter=sut, controls=controls)
    for node in cluster.nodes:
        controls.set_tracking(node, data_prefix(ctx, node))
    start_all(sut)
    recorder = HistoryRecorder.to_dir(tmp_path / "run")
    driver = Driver(sut, recorder)
    nodes = list(cluster.nodes)
    for value in (1, 2, 3):
        acknowledged_write(driver, nodes, value)

    disk = DiskFaults()
    rng = random.Random(0)
    reports = [disk.enact(ctx, "lose-unsynced", rng) for _ in nodes]
    assert sorted(n for r in reports for n in r.nodes) == sorted(nodes), "every node crashed once"
    assert all(r.verified for r in reports)
    for report in reports:
        disk.heal(ctx, report)
    for node in nodes:
        sut.wait_ready(node, 20)

    done = ok_read(driver, nodes, timeout=30)
    recorder.close()
    assert done.value == 3, f"the last acknowledged write was lost: read {done.value!r}"
    assert linearizable(tmp_path / "run").valid is True
