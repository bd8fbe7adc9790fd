"""Redis with Sentinel as the fuzzer sees it: a 3-node netns cluster with an observer per
node and the mediator in the gateway. It comes up with n1 as master; the list-append and
register workloads (clients find the master through Sentinel) check; killing, pausing or
partitioning the master makes the sentinels fail over, clients follow, and a reset brings
every node back as master or replica of one master; the mediator's recording holds the
nodes' packets and the patch's annotated events by name."""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run
from mallory.harness.workload import KeySpace, ListAppendWorkload, RegisterWorkload
from mallory.history.ops import read_history
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.oracles.elle import check_elle
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.models import CasRegister
from mallory.polling import wait_until
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind

pytestmark = pytest.mark.timeout(600)


def _one_master(adapter) -> str:
    """The cluster is healthy: every node ready, one master, every sentinel names it."""
    for node in adapter.backend.nodes:
        adapter.wait_ready(node, 40)
    primaries = adapter.primaries()
    assert len(primaries) == 1, primaries
    assert {adapter.sentinel_view(n) for n in adapter.backend.nodes} == {primaries[0]}
    return primaries[0]


def _failed_over_from(adapter, old: str) -> str:
    """Wait until the sentinels agree on a new master that says it is one."""
    def new_master() -> str | None:
        master = adapter.agreed_master()
        if master in (None, old):
            return None
        info = adapter.replication(master)
        return master if info and info.get("role") == "master" else None

    return wait_until(new_master, 40, f"a failover away from {old}")  # type: ignore[return-value]


def _appends_ok(adapter, out: Path, seconds: float = 2.0) -> tuple[int, list]:
    workload = ListAppendWorkload(KeySpace(key_count=4, max_writes_per_key=200))
    summary = record_run(adapter, workload, RunConfig(concurrency=3, time_limit=seconds, rate=100), out)
    _, history = read_history(out / "history.edn")
    return summary.completions.get("ok", 0), history


def _reset_recovers(nemesis, adapter) -> str:
    report = nemesis.reset()
    assert report.healthy, report.problems
    return _one_master(adapter)


def test_cluster_comes_up_and_workloads_check(observed, tmp_path: Path) -> None:
    _, adapter, _, _ = observed
    assert _one_master(adapter) == "n1"
    oks, history = _appends_ok(adapter, tmp_path / "append", 3.0)
    assert oks > 100
    result = check_elle(history, "list-append")
    assert result.valid is True, result.explanation

    summary = record_run(adapter, RegisterWorkload(), RunConfig(concurrency=3, time_limit=2.0, rate=100), tmp_path / "reg")
    assert summary.completions["ok"] > 50
    _, history = read_history(tmp_path / "reg" / "history.edn")
    result = check_linearizable(history, CasRegister(None))
    assert result.valid is True, result.explanation


@pytest.mark.parametrize("fault", ["kill:primaries", "pause:primaries", "partition:primaries"])
def test_losing_the_master_fails_over_and_reset_recovers(observed, fault: str, tmp_path: Path) -> None:
    _, adapter, nemesis, _ = observed
    old = _one_master(adapter)
    report = nemesis.enact(fault, random.Random(0))
    assert report.verified, report.evidence
    new = _failed_over_from(adapter, old)
    assert new != old
    oks, _ = _appends_ok(adapter, tmp_path / "after")  # clients ask Sentinel, so they follow
    assert oks > 20
    master = _reset_recovers(nemesis, adapter)
    # The old master came back as a replica. Usually of `new`, but Sentinel may abort a
    # failover that is slow to finish (failover-timeout) and elect another replica.
    assert master != old
    assert adapter.replication(old)["role"] == "slave"


def test_a_dead_sentinel_is_back_after_reset(observed) -> None:
    stack, adapter, nemesis, _ = observed
    master = _one_master(adapter)
    victim = next(n for n in stack.cluster.nodes if n != master)
    sentinel = adapter.sentinel_process(victim)
    stack.cluster.signal(sentinel, signal.SIGKILL)
    assert stack.cluster.wait(sentinel, 10) is not None
    assert _reset_recovers(nemesis, adapter) == master
    assert adapter.sentinel_process(victim).pid != sentinel.pid
    assert adapter.sentinel_view(victim) == master  # a fresh sentinel learned the current config


def test_mediator_sees_packets_and_annotated_failover_events(observed, redis_build: Path) -> None:
    """Runs after the fault tests above (file order, one cluster per module): their three
    failovers are what the recording must show."""
    stack, adapter, nemesis, events_file = observed
    catalogue = Catalogue.load(catalogue_path(redis_build / "bin" / "redis-server"))
    labels = {catalogue.name(e.id) for e in catalogue}
    wanted = {
        "sentinel-sdown", "sentinel-odown", "sentinel-failover-start", "sentinel-vote-for-leader",
        "sentinel-elected-leader", "sentinel-selected-replica", "sentinel-promoted-replica",
        "sentinel-switch-master", "sentinel-config-epoch-update", "role-become-master", "role-become-replica",
        "replica-handshake-step", "master-sync-command", "replid-shift",
    }  # fmt: skip
    nodes = set(stack.cluster.nodes)

    def recorded() -> tuple[Counter, Counter] | None:
        with open(events_file, "rb") as f:
            events = [e for r in read_records(f) if isinstance(r, Batch) for e in r.events if e.node in nodes]
        kinds = Counter(e.kind for e in events)
        names = Counter(catalogue.name(e.id) for e in events if e.kind in (Kind.FUNC, Kind.BLOCK))
        return (kinds, names) if wanted <= set(names) else None

    found = wait_until(recorded, 20, "the annotated failover events in the mediator's recording")
    kinds, names = found  # type: ignore[misc]
    assert kinds[Kind.SEND] > 200 and kinds[Kind.RECV] > 200
    assert set(names) <= labels, set(names) - labels  # every code event is one of the patch's
    assert names["replica-psync-continue"] + names["replica-psync-fullresync"] > 0
