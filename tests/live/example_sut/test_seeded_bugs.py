"""The example SUT's seeded bugs, each surfaced by enacting its fault sequence by hand on a
3-node netns cluster (partitions through the mediator's firewall, kill and pause through
the adapter) and flagged by an oracle; the same sequence without the flag is clean.

Client ops are recorded into a real history (HistoryRecorder) and checked by the
linearizability checker; node logs go through the log oracle, exits through death_finding.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from pathlib import Path

import pytest

from mallory.harness.history import HistoryRecorder
from mallory.harness.line_client import LineClient
from mallory.history.ops import read_history
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.logs import death_finding, scan_log
from mallory.oracles.models import CasRegister
from mallory.polling import wait_until
from tests.live.example_sut import example_cluster as ex
from tests.live.stack import tcp_sockets

pytestmark = pytest.mark.timeout(240)


class Driver:
    """Client ops by hand, each recorded as invoke + completion in one history."""

    def __init__(self, sut, recorder: HistoryRecorder) -> None:
        self.sut = sut
        self.recorder = recorder
        self._process = itertools.count()

    def op(self, node: str, f: str, value=None, timeout: float = 1.0):
        process = next(self._process)
        client = LineClient(self.sut.backend.client_address(node), 7000, "register", timeout=timeout)
        self.recorder.invoke(process, f, value)
        try:
            client.open()
            done = client.invoke({"f": f, "value": value})
        except OSError as exc:
            from mallory.harness.client import fail

            done = fail(value, "connect", str(exc))  # nothing was sent
        finally:
            client.close()
        self.recorder.complete(process, done.type, done.value, done.error)
        return done

    def fault(self, f: str, value) -> None:
        self.recorder.nemesis(f, value)


def others(cluster, node: str) -> list[str]:
    return [n for n in cluster.nodes if n != node]


def cut(mediator, node: str, rest: list[str], heal: bool = False) -> None:
    links = [(node, o) for o in rest] + [(o, node) for o in rest]
    (mediator.heal if heal else mediator.drop)(links)


def linearizable(run_dir: Path):
    """The written history, read back by the oracles' reader, checked as a cas-register."""
    _, history = read_history(run_dir / "history.edn")
    return check_linearizable(history, CasRegister())


def findings(sut, node: str):
    return scan_log(ex.log_text(sut, node).splitlines(), node)


def ok_read(driver: Driver, nodes: list[str], timeout: float = 15.0):
    """A read that completes ok on one of `nodes` (retrying through elections)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            done = driver.op(node, "read")
            if done.type == "ok":
                return done
        time.sleep(0.2)
    raise AssertionError("no read completed")


def sticky_leader_sequence(cluster, sut, mediator, driver: Driver) -> str:
    """Partition the leader away; the majority elects a new leader and takes a write; kill
    the new leader; let the lone survivor campaign for a few terms; heal. Returns the old
    leader."""
    old = ex.wait_leader(sut)
    assert driver.op(old, "write", 1).type == "ok"
    rest = others(cluster, old)
    driver.fault("partition", {old: rest})
    cut(mediator, old, rest)
    new = ex.wait_leader(sut, 10, among=rest)
    assert driver.op(new, "write", 2).type == "ok"
    # The read commits only once the survivor stored it (the old leader is cut off), from an
    # append that also carried a commit index past the write, which the survivor applied
    # before answering: when the read returns, the survivor knows the write committed.
    assert driver.op(new, "read").value == 2
    survivor = next(n for n in rest if n != new)
    driver.fault("kill", [new])
    sut.kill(new)
    # The survivor cannot win alone: it campaigns again every 300-600 ms, term after term.
    wait_until(
        lambda: len(re.findall(r"term \d+ candidate\] election started", ex.log_text(sut, survivor))) >= 4,
        15,
        "the survivor to campaign for several terms",
    )
    driver.fault("heal", None)
    cut(mediator, old, rest, heal=True)
    return old


@pytest.mark.parametrize("bugs", [None, "stall-catchup", "sticky-leader"])
def test_sticky_leader_after_partition_then_kill(cluster, binary, tmp_path, bugs) -> None:
    """Flagged with the sticky-leader bug; clean without bugs or with only the other one."""
    _, mediator = ex.start_mediator(cluster)
    sut = ex.adapter(cluster, binary, bugs=bugs)
    recorder = HistoryRecorder.to_dir(tmp_path / "run")
    driver = Driver(sut, recorder)
    for node in cluster.nodes:
        sut.start(node)
    for node in cluster.nodes:
        sut.wait_ready(node)

    old = sticky_leader_sequence(cluster, sut, mediator, driver)
    survivor = next(n for n in cluster.nodes if n != old and sut.is_running(n))
    old_log = lambda: ex.log_text(sut, old)  # noqa: E731
    if bugs == "sticky-leader":
        # The old leader keeps its leadership into the survivor's term; the survivor follows
        # it, and the first client op the old leader replicates overwrites the new leader's
        # committed write on the survivor: its invariant check aborts it.
        wait_until(lambda: "kept leadership into a higher term" in old_log(), 10, "the old leader to keep its leadership")
        driver.op(old, "read")
        status = cluster.wait(sut.process(survivor), 10)
        assert status is not None, "the survivor did not die"
        death = death_finding(status, survivor)
        assert death is not None and death.kind == "killed-by-SIGABRT"
        log = findings(sut, survivor)
        assert [f.kind for f in log] == ["assertion"] and "truncating a committed entry" in log[0].message, log
        recorder.close()
    else:
        read = ok_read(driver, [old, survivor])
        recorder.close()
        assert "kept leadership" not in old_log()
        assert read.value == 2
        for node in (old, survivor):
            assert findings(sut, node) == [], (node, findings(sut, node))
    assert findings(sut, old) == []
    assert linearizable(tmp_path / "run").valid is True  # this bug shows in the logs, not the history


def stall_catchup_sequence(cluster, sut, mediator, driver: Driver, stale_writes: list[threading.Thread]) -> str:
    """Partition the leader away while clients write to it (the writes stay in its log,
    uncommitted); the majority elects a new leader and commits writes; a client reads at
    the old leader; pause the old leader; heal; resume it once the new leader's messages
    wait in its socket."""
    old = ex.wait_leader(sut)
    assert driver.op(old, "write", 1).type == "ok"
    rest = others(cluster, old)
    driver.fault("partition", {old: rest})
    cut(mediator, old, rest)
    for value in (7, 8):  # clients that wait for their answer through it all
        stale = threading.Thread(target=driver.op, args=(old, "write", value), kwargs={"timeout": 30.0})
        stale.start()
        stale_writes.append(stale)
    new = ex.wait_leader(sut, 10, among=rest)
    for value in (2, 3, 4):
        assert driver.op(new, "write", value).type == "ok"
    # A read sent to the old leader after the last write: it waits in its log too.
    stale = threading.Thread(target=driver.op, args=(old, "read"), kwargs={"timeout": 30.0})
    stale.start()
    stale_writes.append(stale)
    # Pause only once all three sit in its log (a loaded host may take a while to deliver
    # them); the leader-finding probes are in that log too, on another key.
    raft_log = cluster.data_dir(old) / "raft.log"

    def stale_ops_logged() -> bool:
        ops = [fields[1] for fields in (line.split(",") for line in raft_log.read_text().splitlines()) if fields[2] == "0"]
        return sorted(ops[-3:]) == ["G", "P", "P"]

    wait_until(stale_ops_logged, 10, "the stale ops in the old leader's log")
    # Back from its stall, a node with the bug applies its own entries up to the new
    # leader's commit index: let that reach past the stale read, however many probes each
    # log holds. More probe reads (another key, outside the history: a write of the
    # register here would let the stale read linearize before it) each commit an entry.
    new_log = cluster.data_dir(new) / "raft.log"
    while len(new_log.read_text().splitlines()) <= len(raft_log.read_text().splitlines()):
        assert ex.request(cluster.client_address(new), "GET probe").startswith("OK")
    # What the others sent the old leader before giving up on a connection (the new leader's
    # vote request and its first appends, of an older commit index) would be retransmitted
    # after the heal and could reach it first: wait until each such connection is reset
    # (after two election timeouts without a reply), so that only fresh ones carry messages.
    old_peer_port = f"{cluster.node_address(old)}:7001"

    def nothing_unsent_to_old() -> bool:
        return not any(
            s.state == "ESTAB" and s.peer == old_peer_port and s.send_q > 0 for n in rest for s in tcp_sockets(cluster, n)
        )

    wait_until(nothing_unsent_to_old, 10, "the others to give up their connections to the old leader")
    driver.fault("pause", [old])
    sut.pause(old)
    paused_at = time.monotonic()
    driver.fault("heal", None)
    cut(mediator, old, rest, heal=True)
    # The new leader reconnects (the paused node's kernel completes the handshake); wait
    # until its appends sit in the paused node's receive queue.
    leader_address = cluster.node_address(new)

    def queued() -> bool:
        return any(
            s.state == "ESTAB" and s.local.endswith(":7001") and s.peer.startswith(f"{leader_address}:") and s.recv_q > 0
            for s in tcp_sockets(cluster, old)
        )

    wait_until(queued, 20, "the new leader's appends queued at the paused node")
    # Resumed, its loop must have stood still longer than an election timeout: the pause's
    # own length, which a busy machine only makes longer.
    time.sleep(max(0.0, paused_at + 2 * ex.ELECTION_S - time.monotonic()))
    stalls = ex.log_text(sut, old).count("stalled for")
    driver.fault("resume", [old])
    sut.resume(old)
    wait_until(lambda: ex.log_text(sut, old).count("stalled for") > stalls, 10, "the resumed old leader to see its stall")
    return old


@pytest.mark.parametrize("bugs", [None, "sticky-leader", "stall-catchup"])
def test_stall_catchup_after_partition_then_pause(cluster, binary, tmp_path, bugs) -> None:
    """Flagged with the stall-catchup bug; clean without bugs or with only the other one."""
    _, mediator = ex.start_mediator(cluster)
    sut = ex.adapter(cluster, binary, bugs=bugs)
    recorder = HistoryRecorder.to_dir(tmp_path / "run")
    driver = Driver(sut, recorder)
    for node in cluster.nodes:
        sut.start(node)
    for node in cluster.nodes:
        sut.wait_ready(node)

    stale: list[threading.Thread] = []
    old = stall_catchup_sequence(cluster, sut, mediator, driver, stale)
    for thread in stale:
        thread.join()
    read = ok_read(driver, others(cluster, old))
    assert read.value == 4
    recorder.close()
    result = linearizable(tmp_path / "run")
    stale_done = [op for op in recorder.ops if op.process in (1, 2, 6) and op.type != "invoke"]
    if bugs == "stall-catchup":
        # Back from the stall, the old leader applied its uncommitted writes and acknowledged
        # them; the cluster never had them: a lost update. Then its own check aborts it.
        assert "caught up after a stall" in ex.log_text(sut, old)
        assert [op.type for op in stale_done] == ["ok"] * 3
        assert {op.value for op in stale_done if op.f == "read"} <= {7, 8}  # the two lost writes, in log order
        assert result.valid is False, result.explanation
        assert result.anomaly_types == ["nonlinearizable"]
        status = cluster.wait(sut.process(old), 10)
        death = death_finding(status, old)
        assert death is not None and death.kind == "killed-by-SIGABRT"
        log = findings(sut, old)
        assert [f.kind for f in log] == ["assertion"] and "committed entry" in log[0].message, log
    else:
        assert "caught up after a stall" not in ex.log_text(sut, old)
        assert [op.type for op in stale_done] == ["info"] * 3  # the old leader lost track of them
        assert result.valid is True, result.explanation
        wait_until(lambda: "following leader" in ex.log_text(sut, old).rsplit("stalled for", 1)[-1], 10, "the old leader to follow")
        assert sut.is_running(old)
        assert findings(sut, old) == []
    for node in others(cluster, old):
        assert findings(sut, node) == []
