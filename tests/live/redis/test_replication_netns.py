"""The harness on the network-namespace backend: a Redis primary with two replicas, a
list-append workload through the gateway, nemesis faults in the history, and the oracles'
readers and Elle-style checker on both written formats."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mallory.cluster.registry import proc_state
from mallory.harness.adapter import HasPrimaries
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, WorkloadRunner
from mallory.harness.workload import KeySpace, ListAppendWorkload
from mallory.history.ops import read_history
from mallory.oracles.elle import check_elle
from mallory.suts.redis.replication import RedisReplicationAdapter
from tests.live.redis.redis_cluster import check_process_semantics
from tests.live.stack import netns_cluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path):
    with netns_cluster("th", tmp_path / "data") as c:
        yield c


def test_list_append_on_a_redis_replica_set_in_namespaces(cluster, tmp_path: Path) -> None:
    adapter = RedisReplicationAdapter(cluster, port=6379, client_timeout=0.5)
    for node in cluster.nodes:
        adapter.start(node)
    for node in cluster.nodes:
        adapter.wait_ready(node)
    assert adapter.primaries() == ["n1"]
    assert isinstance(adapter, HasPrimaries)

    workload = ListAppendWorkload(KeySpace(key_count=5, max_writes_per_key=100))
    recorder = HistoryRecorder.to_dir(tmp_path / "run")

    def nemesis() -> None:
        time.sleep(1.0)
        with recorder.nemesis_action("kill", ["n3"]):
            adapter.kill("n3")
        time.sleep(0.5)
        with recorder.nemesis_action("pause", ["n1"]) as outcome:
            adapter.pause("n1")
            outcome["value"] = {"n1": proc_state(adapter.process("n1").pid)}
        time.sleep(1.0)
        with recorder.nemesis_action("resume", ["n1"]):
            adapter.resume("n1")
        with recorder.nemesis_action("start", ["n3"]):
            adapter.start("n3")

    fault = threading.Thread(target=nemesis)
    fault.start()
    WorkloadRunner(
        workload,
        lambda w: adapter.client("n1", workload),  # clients reach the primary through the gateway
        recorder,
        RunConfig(concurrency=5, time_limit=4.5, rate=300),
    ).run()
    fault.join()
    recorder.close()
    adapter.wait_ready("n3")  # the restarted replica resynced from the primary

    counts = check_process_semantics(recorder.ops)
    assert counts["ok"] > 100 and counts["info"] >= 1 and counts["nemesis"] == 8
    for name in ("history.edn", "history.jsonl"):
        _, history = read_history(tmp_path / "run" / name)
        assert len(history) == len(recorder.ops)
        assert [op.f for op in history if op.process == "nemesis"] == ["kill"] * 2 + ["pause"] * 2 + ["resume"] * 2 + ["start"] * 2
        result = check_elle(history, "list-append")
        assert result.valid is True, result.explanation
    paused = [op for op in recorder.ops if op.process == "nemesis" and op.f == "pause"]
    assert paused[1].value == {"n1": "T"}  # the primary really was stopped


def test_workload_command_on_a_netns_run(cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mallory.cli import main

    out = tmp_path / "run"
    code = main([
        "workload", "--sut", "redis-replication", "--run", cluster.run, "--workload", "register",
        "--time-limit", "1.5", "--rate", "200", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    assert "register on redis-replication (netns, 3 nodes)" in capsys.readouterr().out
    _, history = read_history(out / "history.edn")
    counts = check_process_semantics(history)
    assert counts["ok"] > 50
    assert not any(proc_state(p.pid) not in (None, "Z") for p in cluster.processes() if p.name == "sut")  # torn down
