"""A controller killed with -9 while clock, disk and process faults are in force:
`mallory cleanup RUN` still removes everything the faults made (root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mallory import paths
from mallory.cluster.registry import existing_netns, proc_state

pytestmark = pytest.mark.timeout(120)
REPO = paths.HOME

CONTROLLER = r"""
import random, sys, time
from pathlib import Path
from mallory.suts.redis.replication import RedisReplicationAdapter
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import NodeControls
from nemesis.nemesis import Nemesis
from mallory.cluster.netns import NetnsCluster

cluster = NetnsCluster.up(sys.argv[1], 2, data_root=Path(sys.argv[2]))
adapter = RedisReplicationAdapter(cluster, port=6379)
controls = NodeControls(cluster.record, cluster.nodes).prepare()
adapter.add_env_overlay(controls)
for node in cluster.nodes:
    adapter.start(node)
for node in cluster.nodes:
    adapter.wait_ready(node)
nemesis = Nemesis(FaultContext(cluster, adapter, None, controls), enabled=["clock", "disk:eio", "pause:one"])
for label in ("clock:strobe", "disk:eio", "pause:one"):
    assert nemesis.enact(label, random.Random(0)).verified, label
print(" ".join(str(adapter.process(n).pid) for n in cluster.nodes), controls.dir, flush=True)
time.sleep(600)
"""


def test_cleanup_after_kill_minus_9_removes_what_the_faults_made(tmp_path):
    run = f"nk-{uuid.uuid4().hex[:6]}"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, run, str(tmp_path / "data")], cwd=REPO,
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = controller.stdout.readline().split()
        assert line, "the controller did not get its faults in force"
        pids, faults_dir = [int(p) for p in line[:-1]], Path(line[-1])
        assert faults_dir.is_dir() and any(proc_state(p) == "T" for p in pids)
    finally:
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait(10)
    result = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not faults_dir.exists()
    assert all(proc_state(p) in (None, "Z") for p in pids)
    assert not [ns for ns in existing_netns() if ns.startswith(f"mal-{run}-")]
