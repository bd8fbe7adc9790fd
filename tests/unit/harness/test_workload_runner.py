"""Workload generators and the runner's Jepsen process semantics, against an in-memory fake."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from typing import Any, Mapping

import pytest

from mallory.errors import MalloryError
from mallory.harness.client import Completion, fail, info, ok
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, WorkloadRunner
from mallory.harness.workload import (
    KeySpace,
    ListAppendWorkload,
    RegisterWorkload,
    make_workload,
)


def test_list_append_values_are_unique_per_key_across_threads() -> None:
    wl = ListAppendWorkload(KeySpace(key_count=3, max_writes_per_key=None))
    appended: list[tuple[int, int]] = []
    lock = threading.Lock()

    def gen(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(500):
            op = wl.next_op(rng)
            assert op["f"] == "txn" and 1 <= len(op["value"]) <= 4
            with lock:
                for f, k, v in op["value"]:
                    assert f in ("append", "r")
                    if f == "append":
                        appended.append((k, v))
                    else:
                        assert v is None

    threads = [threading.Thread(target=gen, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(appended) == len(set(appended)) > 500
    assert {k for k, _ in appended} == {0, 1, 2}


def test_keys_retire_after_max_writes_and_exponential_prefers_low_keys() -> None:
    keys = KeySpace(key_count=4, distribution="exponential", max_writes_per_key=3)
    rng = random.Random(7)
    counts = Counter(keys.pick(rng) for _ in range(4000))
    assert counts[0] > counts[1] > counts[2] > counts[3] > 0
    assert [keys.next_value(0) for _ in range(3)] == [1, 2, 3]
    later = {keys.pick(rng) for _ in range(2000)}
    assert 0 not in later and 4 in later  # key 0 was replaced by the fresh key 4


def test_register_shapes_single_and_independent() -> None:
    rng = random.Random(1)
    single = RegisterWorkload(key_count=1, value_range=5)
    ops = [single.next_op(rng) for _ in range(300)]
    assert {o["f"] for o in ops} == {"read", "write", "cas"}
    for o in ops:
        if o["f"] == "read":
            assert o["value"] is None
        elif o["f"] == "write":
            assert 0 <= o["value"] < 5
        else:
            assert len(o["value"]) == 2
    multi = RegisterWorkload(key_count=3)
    for o in (multi.next_op(rng) for _ in range(100)):
        k, arg = o["value"]
        assert 0 <= k < 3
        if o["f"] == "cas":
            assert len(arg) == 2


def test_rw_register_and_bad_options() -> None:
    wl = make_workload("rw-register", key_count=2, max_txn_length=2)
    op = wl.next_op(random.Random(3))
    assert all(m[0] in ("w", "r") for m in op["value"])
    with pytest.raises(MalloryError, match="unknown workload"):
        make_workload("bank")
    with pytest.raises(MalloryError, match="distribution"):
        make_workload("list-append", distribution="zipf")
    with pytest.raises(MalloryError, match="list-append"):
        make_workload("list-append", colour="red")
    with pytest.raises(MalloryError, match="concurrency"):
        RunConfig(concurrency=0)


class FakeFlakyRegisterClient:
    """An in-memory register whose every 5th op times out (applied or not, at random)."""

    store: dict[str, Any] = {}
    lock = threading.Lock()
    opened = Counter()

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.calls = 0
        self.rng = random.Random(worker)

    def open(self) -> None:
        FakeFlakyRegisterClient.opened[self.worker] += 1

    def close(self) -> None:
        pass

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        time.sleep(0.001)  # a round trip, so all workers get to run
        self.calls += 1
        if self.calls % 5 == 0:
            if self.rng.random() < 0.5 and op["f"] == "write":
                with self.lock:
                    self.store["x"] = op["value"]
            return info(op["value"], "timeout")
        with self.lock:
            if op["f"] == "read":
                return ok(self.store.get("x"))
            if op["f"] == "write":
                self.store["x"] = op["value"]
                return ok(op["value"])
            old, new = op["value"]
            if self.store.get("x") == old:
                self.store["x"] = new
                return ok(op["value"])
            return fail(op["value"], "cas-mismatch")


def test_runner_retires_processes_after_info_and_pairs_every_invoke() -> None:
    rec = HistoryRecorder([])
    config = RunConfig(concurrency=3, time_limit=5.0, op_limit=300)
    summary = WorkloadRunner(RegisterWorkload(), FakeFlakyRegisterClient, rec, config).run()
    ops = rec.ops
    assert summary.invokes == 300
    assert sum(1 for o in ops if o.type == "invoke") == 300
    assert summary.completions["info"] == sum(1 for o in ops if o.type == "info") > 0
    open_: dict[int, str] = {}
    retired: set[int] = set()
    for o in ops:
        assert o.process not in retired, f"process {o.process} reused after info"
        if o.type == "invoke":
            assert o.process not in open_
            open_[o.process] = o.f
        else:
            assert open_.pop(o.process) == o.f
            if o.type == "info":
                retired.add(o.process)
    assert not open_
    # every worker ran, and retired ids moved on by the concurrency: Jepsen's process + concurrency
    assert {o.process % 3 for o in ops} == {0, 1, 2}
    assert max(o.process for o in ops) >= 3
    assert summary.processes == 3 + summary.completions["info"]
    # a fresh client is opened for every retired process
    assert sum(FakeFlakyRegisterClient.opened.values()) == summary.processes


class FakeBrokenClient:
    """A client with a bug: invoke raises."""

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        raise KeyError("bug")


def test_a_raising_client_becomes_info_not_a_dangling_invoke() -> None:
    rec = HistoryRecorder([])
    WorkloadRunner(RegisterWorkload(), lambda w: FakeBrokenClient(), rec, RunConfig(concurrency=2, op_limit=6)).run()
    ops = rec.ops
    assert len(ops) == 12
    assert all(o.type == "info" and o.error[0] == "client-exception" for o in ops if o.type != "invoke")


class FakeInstantClient:
    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        return ok(op["value"])


def test_rate_limit_and_time_limit_hold() -> None:
    """Invokes are paced 1/rate apart over all workers, slot k at k/rate: a busy machine can
    only make one later than its slot, never earlier, and the slots that lost time are
    followed by ones that catch up, so the typical gap stays 1/rate."""
    rec = HistoryRecorder([])  # its times count from here, before the run's first slot
    summary = WorkloadRunner(
        RegisterWorkload(), lambda w: FakeInstantClient(), rec, RunConfig(concurrency=4, rate=50, time_limit=1.0)
    ).run()
    interval_ns = 1e9 / 50
    invokes = sorted(o.time for o in rec.ops if o.type == "invoke")
    assert summary.invokes == len(invokes) <= 51  # the slots before the deadline (one at t=0)
    assert all(t >= k * interval_ns - 1e6 for k, t in enumerate(invokes)), "an invoke came before its slot"  # (1 ms: clock rounding)
    assert statistics.median(b - a for a, b in zip(invokes, invokes[1:])) < 1.5 * interval_ns, "paced slower than asked"
    assert 0.9 <= summary.elapsed < 10  # it ran out its time limit, and stopped at it


class FakeCrashingWorkload:
    """A workload that breaks after a few ops: the run must fail loudly, not hang or hide it."""

    name = "register"

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def next_op(self, rng: random.Random) -> dict[str, Any]:
        with self.lock:
            self.n += 1
            if self.n > 10:
                raise ZeroDivisionError("generator bug")
        return {"f": "read", "value": None}


def test_a_harness_crash_stops_the_run_and_is_raised() -> None:
    rec = HistoryRecorder([])
    runner = WorkloadRunner(FakeCrashingWorkload(), lambda w: FakeInstantClient(), rec, RunConfig(concurrency=3, time_limit=30))
    t0 = time.monotonic()
    with pytest.raises(ZeroDivisionError):
        runner.run()
    assert time.monotonic() - t0 < 5
    assert sum(1 for o in rec.ops if o.type == "invoke") == 10
