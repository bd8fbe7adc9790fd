"""The pysyncobj KV service as the fuzzer sees it: a 3-node netns cluster with an observer
in every node and the mediator in the gateway. A leader is elected, the register workload
(through the gateway) checks linearizable and list-append under Elle, kill / pause / partition each leave it able to
serve again once healed, and the traced pysyncobj internals and the service's annotations
reach the mediator: in its recording by name, and in its timeline's window summaries."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import make_workload
from mallory.history.ops import read_history
from mallory.instrument import toolchain
from mallory.oracles.elle import check_elle
from mallory.oracles.logs import scan_log
from mallory.polling import wait_until
from mallory.timeline.event import Kind
from tests.live import stack as live
from tests.live.example_sut import example_cluster as ex
from tests.live.pysyncobj import kv_cluster as kv

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster(tmp_path: Path):
    toolchain.ensure_built()  # the nodes load libmallory_rt.so: build it once, not in three nodes at once
    with live.netns_cluster("ps", tmp_path / "data") as c:
        yield c


def _workload(sut, out: Path, seconds: float) -> int:
    """The register workload on key 0 for `seconds`, checked from the value it starts with."""
    reply = kv.request(sut.backend.client_address(kv.wait_leader(sut)), "GET 0")
    assert reply.startswith("OK "), reply
    return live.checked_register_run(sut, out, seconds, None if reply == "OK nil" else int(reply[3:]), rate=100)


def _serves(sut, value: int, among: list[str] | None = None) -> str:
    """Write `value` through the leader, read it back through another node; the leader."""
    leader = kv.wait_leader(sut, 30, among)
    other = next(n for n in (among or sut.backend.nodes) if n != leader)
    assert kv.request(sut.backend.client_address(leader), f"PUT r {value}") == "OK"
    assert kv.request(sut.backend.client_address(other), "GET r") == f"OK {value}"
    return leader


def _window_has(mediator, start_ns: int, token: str) -> bool:
    """The mediator's timeline summarises [start_ns, now - 1 s) with an element naming `token`."""
    answer = mediator.window(start_ns, time.time_ns() - 1_000_000_000, wait_s=10.0)
    return answer["complete"] and any(token in element for element in answer["summary"])


def test_observed_cluster_survives_kill_pause_and_partition(cluster, tmp_path: Path) -> None:
    ids = kv.ids_by_name(kv.catalogue(tmp_path))
    names = {i: n for n, i in ids.items()}
    with live.observed(cluster, tmp_path / "rec") as mediator:
        sut = kv.adapter(cluster)
        started_ns = time.time_ns()
        try:
            start_all(sut)
            leader = _serves(sut, 1)
            assert _workload(sut, tmp_path / "run1", 2.0) >= 10
            # the first election is in the mediator's live timeline, as a FUNC event of its id
            wait_until(lambda: _window_has(mediator, started_ns, f"FUNC:{ids['raft-become-leader']:x}"), 30,
                       "raft-become-leader in a timeline window")

            sut.kill(leader)  # kill: another node takes over; the restarted one rejoins from its journal
            second = _serves(sut, 2, [n for n in cluster.nodes if n != leader])
            sut.start(leader)
            sut.wait_ready(leader)

            sut.pause(second)  # pause: the others elect; the resumed one follows
            third = _serves(sut, 3, [n for n in cluster.nodes if n != second])
            sut.resume(second)

            rest = [n for n in cluster.nodes if n != third]  # partition the leader away
            mediator.partition([[third], rest])
            fourth = kv.wait_leader(sut, 30, among=rest)
            assert kv.request(cluster.client_address(fourth), "PUT r 4") == "OK"
            mediator.heal()
            assert _serves(sut, 5) in cluster.nodes
            assert _workload(sut, tmp_path / "run2", 1.5) >= 10
            summary = record_run(sut, make_workload("list-append"), RunConfig(concurrency=3, time_limit=1.5, rate=100), tmp_path / "run3")
            assert summary.completions["ok"] >= 10, summary
            result = check_elle(read_history(tmp_path / "run3" / "history.edn")[1], "list-append")
            assert result.valid is True, result.explanation
            for node in cluster.nodes:
                assert scan_log(ex.log_text(sut, node).splitlines(), node) == []
        finally:
            teardown_all(sut)

    events = live.node_events(tmp_path / "rec", cluster.nodes)
    kinds = Counter(e.kind for e in events)
    assert kinds[Kind.SEND] > 500 and kinds[Kind.RECV] > 500
    code = {node: Counter(names.get(e.id, f"unknown:{e.id:x}") for e in events if e.node == node and e.kind in (Kind.FUNC, Kind.BLOCK))
            for node in cluster.nodes}
    everywhere: Counter = Counter()
    for node, counted in code.items():
        assert set(counted) <= set(ids), (node, counted)  # every code event is in the catalogue
        for name in ("raft-log-append", "raft-apply", "apply-put", "client-request", "raft-set-term"):
            assert counted[name] > 0, (node, name, counted)
        everywhere.update(counted)
    for name in (*kv.TRACED, *kv.ANNOTATED):
        assert everywhere[name] > 0, (name, everywhere)
    assert everywhere["raft-become-leader"] >= 4  # the first election, then after kill, pause and partition
