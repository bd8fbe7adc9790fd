"""Transactions on the pysyncobj KV service (loopback backend, no root): a TXN line is one
log entry, a malformed one applies nothing, the list-append and rw-register workloads
through the built-in adapter's txn client check under Elle, and afterwards the replicas'
hash chains over what they applied (DIGEST) agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.cluster.loopback import LoopbackBackend
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import APPEND, READ, make_workload
from mallory.history.ops import read_history
from mallory.oracles.elle import check_elle
from mallory.oracles.replicas import divergence_findings
from mallory.polling import wait_until
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

    # every replica applied the same commands: their chains agree at a common index
    def caught_up() -> dict | None:
        digests = sut.applied_digests()
        common = min((min(applied) for applied in digests.values()), default=None)
        every = len(digests) == 3 and all(common in applied for applied in digests.values())
        return digests if every else None

    digests = wait_until(caught_up, 15, "every replica's chain at a common index")
    assert divergence_findings(digests) == [], digests
    applied, chain = max(digests[leader].items())
    assert ask(leader, f"DIGEST {applied}") == f"OK index={applied} chain={chain}"
    assert ask(leader, "DIGEST 0") == "ERR not-kept" and ask(leader, "DIGEST x").startswith("ERR bad request")
