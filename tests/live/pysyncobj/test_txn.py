"""Transactions on the pysyncobj KV service (loopback backend, no root): a TXN line is one
log entry, a malformed one applies nothing, and the list-append and rw-register workloads
through the built-in adapter's txn client check under Elle."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.cluster.loopback import LoopbackBackend
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import APPEND, READ, make_workload
from mallory.history.ops import read_history
from mallory.oracles.elle import check_elle
from tests.live.pysyncobj import kv_cluster as kv

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def sut():
    backend = LoopbackBackend(3)
    adapter = kv.adapter(backend)
    try:
        yield adapter
    finally:
        teardown_all(adapter)
        backend.destroy()


def test_txn_protocol_and_elle_checked_txn_workloads(sut, tmp_path: Path) -> None:
    start_all(sut)
    leader = kv.wait_leader(sut)
    follower = next(n for n in sut.backend.nodes if n != leader)
    ask = lambda node, line: kv.request(sut.backend.client_address(node), line)  # noqa: E731
    assert ask(follower, "TXN r:x a:x:1 a:x:2 r:x w:y:7 r:y r:z") == "OK nil _ _ 1,2 _ 7 nil"
    for bad in ("TXN", "TXN q:x", "TXN r:x:1", "TXN a:x", "TXN a:x:1:2", "TXN r: a:x:3"):
        assert ask(leader, bad).startswith("ERR bad transaction"), bad
    assert ask(leader, "GET x") == "OK 1,2"  # nothing of the refused lines applied

    client = sut.client(follower, make_workload("list-append"))  # key 1000: none of the workloads' below
    client.open()
    try:
        done = client.invoke({"f": "txn", "value": [[APPEND, 1000, 1], [READ, 1000, None]]})
    finally:
        client.close()
    assert done.type == "ok" and done.value == [[APPEND, 1000, 1], [READ, 1000, [1]]]

    for name in ("list-append", "rw-register"):
        run = tmp_path / name
        summary = record_run(sut, make_workload(name), RunConfig(concurrency=3, time_limit=1.5, rate=150), run)
        assert summary.completions["ok"] > 20, summary
        _, history = read_history(run / "history.edn")
        result = check_elle(history, name)
        assert result.valid is True, result.explanation
