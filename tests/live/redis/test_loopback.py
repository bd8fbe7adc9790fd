"""Adapters and workloads against real redis-server processes on loopback (no root)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from mallory.cluster.loopback import LoopbackBackend
from mallory.cluster.registry import proc_state
from mallory.harness.adapter import HasPrimaries, Membership, Promotable
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, WorkloadRunner
from mallory.harness.spec import parse_spec
from mallory.harness.spec_adapter import SpecAdapter
from mallory.harness.workload import KeySpace, ListAppendWorkload, RegisterWorkload
from mallory.history.ops import read_history
from mallory.suts.redis.client import RedisClient
from mallory.suts.redis.replication import RedisReplicationAdapter
from mallory.suts.registry import SPEC_CLIENTS
from tests.live.redis.redis_cluster import (
    check_process_semantics,
    free_port,
    redis_spec_text,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LoopbackBackend]:
    b = LoopbackBackend(1, root=tmp_path / "cluster")
    yield b
    b.down()


def spec_adapter(backend: LoopbackBackend, probe: str = "tcp") -> SpecAdapter:
    port = free_port([backend.node_address(n) for n in backend.nodes])
    return SpecAdapter(parse_spec(redis_spec_text(port, probe), "redis.toml"), backend, clients=SPEC_CLIENTS)


def test_kill_pause_resume_stop_change_the_real_process(backend: LoopbackBackend) -> None:
    adapter = spec_adapter(backend)
    proc = adapter.start("n1")
    adapter.wait_ready("n1")
    assert adapter.start("n1") == proc  # start is idempotent while running
    assert proc_state(proc.pid) in ("S", "R")

    client = adapter.client("n1", RegisterWorkload())
    client.open()
    adapter.pause("n1")
    assert proc_state(proc.pid) == "T"
    assert adapter.is_running("n1")  # a stopped process still counts as running
    try:
        timed_out = client.invoke({"f": "read", "value": None})
    finally:
        client.close()
    assert timed_out.type == "info" and timed_out.error[0] == "timeout"

    adapter.resume("n1")
    assert proc_state(proc.pid) in ("S", "R")

    adapter.kill("n1")
    assert not adapter.is_running("n1")
    assert proc_state(proc.pid) is None  # gone and reaped

    proc2 = adapter.start("n1")
    assert proc2.pid != proc.pid
    adapter.wait_ready("n1")
    adapter.stop("n1")  # graceful: redis exits on SIGTERM
    assert not adapter.is_running("n1")
    log = adapter.log_paths("n1")[0].read_text()
    assert log.count("Ready to accept connections") == 2
    assert "Received SIGTERM" in log


def test_graceful_stop_of_a_paused_node_and_sigkill_fallback(backend: LoopbackBackend) -> None:
    adapter = spec_adapter(backend)
    adapter.start("n1")
    adapter.wait_ready("n1")
    adapter.pause("n1")
    adapter.stop("n1")  # SIGTERM + SIGCONT: a paused node still stops
    assert not adapter.is_running("n1")

    # A stop signal the SUT ignores (SIGWINCH's default action is to ignore it):
    # stop() must fall back to SIGKILL once stop_timeout has passed.
    adapter.stop_signal = signal.SIGWINCH
    adapter.stop_timeout = 0.5
    proc = adapter.start("n1")
    adapter.wait_ready("n1")
    t0 = time.monotonic()
    adapter.stop("n1")
    assert not adapter.is_running("n1")
    assert proc_state(proc.pid) is None
    assert time.monotonic() - t0 >= 0.5


@pytest.mark.parametrize("probe", ["log", "command"])
def test_log_and_command_probes_wait_for_this_run(backend: LoopbackBackend, probe: str) -> None:
    adapter = spec_adapter(backend, probe)
    adapter.start("n1")
    adapter.wait_ready("n1")
    adapter.kill("n1")
    assert not adapter.is_ready("n1")
    adapter.start("n1")
    if probe == "log":
        # The old "Ready" line must not count for the new process.
        assert adapter._log_offsets["n1"][adapter.log_paths("n1")[0]] > 0
    adapter.wait_ready("n1")
    client = adapter.client("n1", RegisterWorkload())
    client.open()
    assert client.invoke({"f": "write", "value": 3}).type == "ok"
    client.close()


def test_unsupported_membership_is_refused(backend: LoopbackBackend) -> None:
    adapter = spec_adapter(backend)
    assert not isinstance(adapter, Membership) and not isinstance(adapter, HasPrimaries)
    assert not hasattr(adapter, "add_member") and not hasattr(adapter, "primaries")  # no stub that raises


def _pause_nemesis(adapter: SpecAdapter, recorder: HistoryRecorder, at: float, length: float) -> threading.Thread:
    def run() -> None:
        time.sleep(at)
        with recorder.nemesis_action("pause", ["n1"]):
            adapter.pause("n1")
        time.sleep(length)
        with recorder.nemesis_action("resume", ["n1"]):
            adapter.resume("n1")

    t = threading.Thread(target=run)
    t.start()
    return t


def test_list_append_workload_on_real_redis(backend: LoopbackBackend, tmp_path: Path) -> None:
    adapter = spec_adapter(backend)
    adapter.start("n1")
    adapter.wait_ready("n1")
    workload = ListAppendWorkload(KeySpace(key_count=5, max_writes_per_key=200))
    recorder = HistoryRecorder.to_dir(tmp_path / "run")
    nemesis = _pause_nemesis(adapter, recorder, at=1.5, length=1.2)
    summary = WorkloadRunner(
        workload, lambda w: adapter.client("n1", workload), recorder, RunConfig(concurrency=5, time_limit=5.0, rate=400)
    ).run()
    nemesis.join()
    recorder.close()

    ops = recorder.ops
    counts = check_process_semantics(ops)
    assert counts["ok"] > 200
    assert summary.invokes <= 400 * 5 + 5  # the rate limit holds
    assert counts["info"] >= 1  # the pause timed some ops out, and their processes retired
    assert counts["nemesis"] == 4
    assert summary.processes == 5 + counts["info"]

    # unique appended values per key
    appends = [(k, v) for op in ops if op.type == "invoke" for f, k, v in op.value if f == "append"]
    assert len(appends) == len(set(appends))

    # one node, MULTI/EXEC: every ok read is a prefix of the final list, which holds every ok append
    final: dict[int, list[int]] = {}
    reader = RedisClient(backend.client_address("n1"), adapter.spec.ports["client"], "list-append")
    reader.open()
    keys = sorted({k for k, _ in appends})
    done = reader.invoke({"f": "txn", "value": [["r", k, None] for k in keys]})
    reader.close()
    assert done.type == "ok"
    final = {k: v for _, k, v in done.value}
    for op in ops:
        if op.type != "ok":
            continue
        for f, k, v in op.value:
            if f == "r":
                assert final[k][: len(v)] == v
            else:
                assert v in final[k]

    # both formats on disk, line for line the same history
    fmt_e, from_edn = read_history(tmp_path / "run" / "history.edn")
    fmt_j, from_json = read_history(tmp_path / "run" / "history.jsonl")
    assert (fmt_e, fmt_j) == ("edn", "json")
    assert len(from_edn) == len(from_json) == len(ops)
    for a, b, mine in zip(from_edn, from_json, ops):
        assert (a.index, a.type, a.process, a.f, a.value, a.time) == (b.index, b.type, b.process, b.f, b.value, b.time)
        assert (a.index, a.type, a.process, a.f, a.value, a.time) == (
            mine.index, mine.type, mine.process, mine.f, mine.value, mine.time,
        )  # fmt: skip
    nemesis_ops = [a for a in from_edn if a.process == "nemesis"]
    assert [a.type for a in nemesis_ops] == ["info"] * 4 and {a.f for a in nemesis_ops} == {"pause", "resume"}

    # and the oracles' Elle-style checker finds a single Redis strict-serializable
    from mallory.oracles.elle import check_elle

    for history in (from_edn, from_json):
        result = check_elle(history, "list-append")
        assert result.valid is True, result.explanation


def test_register_workload_on_real_redis_is_linearizable(backend: LoopbackBackend, tmp_path: Path) -> None:
    from mallory.oracles.linearizability import check_linearizable
    from mallory.oracles.models import make_model

    adapter = spec_adapter(backend)
    adapter.start("n1")
    adapter.wait_ready("n1")
    workload = RegisterWorkload(key_count=1, value_range=5)
    recorder = HistoryRecorder.to_dir(tmp_path / "run")
    nemesis = _pause_nemesis(adapter, recorder, at=1.0, length=1.0)
    WorkloadRunner(
        workload, lambda w: adapter.client("n1", workload), recorder, RunConfig(concurrency=5, time_limit=3.5, rate=300)
    ).run()
    nemesis.join()
    recorder.close()
    counts = check_process_semantics(recorder.ops)
    assert counts["ok"] > 100 and counts["info"] >= 1
    assert {op.f for op in recorder.ops if op.process != "nemesis"} == {"read", "write", "cas"}
    for name in ("history.edn", "history.jsonl"):
        _, history = read_history(tmp_path / "run" / name)
        result = check_linearizable(history, make_model("cas-register"), time_limit=60)
        assert result.valid is True, result.explanation


def test_replication_adapter_knows_primaries_and_promotes(tmp_path: Path) -> None:
    backend = LoopbackBackend(3, root=tmp_path / "cluster")
    try:
        port = free_port([backend.node_address(n) for n in backend.nodes])
        adapter = RedisReplicationAdapter(backend, port=port)
        assert isinstance(adapter, HasPrimaries) and isinstance(adapter, Promotable)
        assert not isinstance(adapter, Membership)
        for node in backend.nodes:
            adapter.start(node)
        for node in backend.nodes:
            adapter.wait_ready(node)  # replicas: ready once linked to the primary
        assert adapter.primaries() == ["n1"]

        workload = ListAppendWorkload()
        writer = adapter.client("n1", workload)
        writer.open()
        assert writer.invoke({"f": "txn", "value": [["append", 1, 1]]}).type == "ok"
        writer.close()
        replica = adapter.client("n3", workload)
        replica.open()
        refused = replica.invoke({"f": "txn", "value": [["append", 1, 2]]})
        assert refused.type == "fail" and "ReadOnlyError" in refused.error[1]  # replicas refuse writes
        deadline = time.monotonic() + 5
        while replica.invoke({"f": "txn", "value": [["r", 1, None]]}).value != [["r", 1, [1]]]:
            assert time.monotonic() < deadline, "the write never reached the replica"
            time.sleep(0.05)
        replica.close()

        adapter.promote("n2")
        assert adapter.primaries() == ["n2"]
        deadline = time.monotonic() + 10
        while not all(adapter.is_ready(n) for n in backend.nodes):
            assert time.monotonic() < deadline, "replicas did not follow the new primary"
            time.sleep(0.1)
        adapter.kill("n1")
        assert adapter.primaries() == ["n2"]
    finally:
        backend.destroy()


@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof-fsync-always"])
def test_kill_and_restart_the_oracles_judge_what_redis_kept(
    backend: LoopbackBackend, tmp_path: Path, persistent: bool
) -> None:
    """The whole pipeline on a real fault: kill -9 the only Redis mid-run and restart it.
    Without persistence it comes back empty, so reads after the restart are not extensions
    of reads before it, and Elle says so; with an fsynced AOF nothing acknowledged is lost."""
    from mallory.oracles.elle import check_elle

    port = free_port([backend.node_address("n1")])
    text = redis_spec_text(port)
    if persistent:
        text = text.replace('"--appendonly", "no"', '"--appendonly", "yes", "--appendfsync", "always"')
    adapter = SpecAdapter(parse_spec(text, "redis.toml"), backend, clients=SPEC_CLIENTS)
    adapter.start("n1")
    adapter.wait_ready("n1")
    workload = ListAppendWorkload(KeySpace(key_count=3, distribution="uniform", max_writes_per_key=None))
    recorder = HistoryRecorder.to_dir(tmp_path / "run")

    def nemesis() -> None:
        time.sleep(1.0)
        with recorder.nemesis_action("kill", ["n1"]):
            adapter.kill("n1")
        time.sleep(0.5)
        with recorder.nemesis_action("start", ["n1"]):
            adapter.start("n1")
            adapter.wait_ready("n1")

    fault = threading.Thread(target=nemesis)
    fault.start()
    WorkloadRunner(
        workload, lambda w: adapter.client("n1", workload), recorder, RunConfig(concurrency=5, time_limit=3.0, rate=300)
    ).run()
    fault.join()
    recorder.close()
    check_process_semantics(recorder.ops)

    _, history = read_history(tmp_path / "run" / "history.jsonl")
    result = check_elle(history, "list-append")
    if persistent:
        assert result.valid is True, result.explanation
    else:
        assert result.valid is False
        assert "incompatible-order" in result.anomaly_types
