"""raft-kv without root: it builds warning-clean with mallory-cc (the catalogue names every
annotation), and a 3-node cluster on loopback serves the line protocol (followers name the
leader) and atomic TXN lines (list-append and rw-register check under Elle), snapshots with a small threshold and restores a restarted node from one (its own,
and one the leader sends), keeps the replicas' applied hash chains equal through both
restores (DIGEST), stops gracefully on SIGTERM, and changes its membership (remove + add
back under a fresh raft id, roles, leadership transfer) through the adapter."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from mallory.errors import MalloryError
from mallory.harness.adapter import Membership, Promotable
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import APPEND, READ, make_workload
from mallory.history.ops import read_history
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.instrument.event_ids import event_id
from mallory.observer.ring import RingReader
from mallory.oracles.elle import check_elle
from mallory.oracles.replicas import divergence_findings
from mallory.polling import wait_until
from mallory.suts.raft_kv.adapter import fresh_raft_id
from tests.live.raft_kv import raft_cluster as rc
from tests.live.stack import free_ports, loopback_with_rings

pytestmark = pytest.mark.timeout(240)


def test_catalogue_names_every_annotation(binary: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(binary))
    labels = Counter(e.label for e in catalogue)
    assert set(labels) == rc.LABELS and set(labels.values()) == {1}
    source = rc.SOURCE.read_text().splitlines()
    for event in catalogue:
        assert event.file == "suts/raft/raft_kv.c"
        assert event.id == event_id(event.file, event.line, event.kind)
        above = [line.strip() for line in source[: event.line - 1] if line.strip()][-1]
        assert above == f"// INSTRUMENT_{event.kind} {event.label}", (event, above)


def test_builds_without_warnings_under_gcc_too(tmp_path: Path) -> None:
    """-Wall -Wextra -Werror with gcc at -O2 (its format-truncation checks are stricter)."""
    result = subprocess.run(
        ["make", "-C", str(rc.SUT_DIR), "CC=gcc", "CFLAGS=-O2 -Wall -Wextra -Werror -std=c11", f"BUILD={tmp_path}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


def test_bad_flags_are_refused(binary: Path, tmp_path: Path) -> None:
    base = [str(binary), "--listen", "127.0.0.1", "--client-port", "1", "--raft-port", "2", "--data", str(tmp_path)]
    result = subprocess.run([*base, "--heartbeat-ms", "500", "--election-ms", "400"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "must be below --election-ms" in result.stderr
    result = subprocess.run([*base, "--peers", "nocolon"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "not an ip:port address: nocolon" in result.stderr


@pytest.fixture
def loopback():
    with loopback_with_rings() as backend:
        yield backend


def _sut(loopback, binary: Path, *flags: str):
    return rc.adapter(loopback, binary, *flags, ports=tuple(free_ports(2)))


def test_protocol_redirects_and_graceful_stop(binary: Path, loopback) -> None:
    sut = _sut(loopback, binary)
    catalogue = Catalogue.load(catalogue_path(binary))
    readers = {n: RingReader(loopback.shm_name(n), node=n) for n in loopback.nodes}
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        follower = next(n for n in loopback.nodes if n != leader)
        ask = lambda line: rc.ask(sut, leader, line)  # noqa: E731
        assert ask("PUT a 1") == "OK" and ask("GET a") == "OK 1"
        assert ask("CAS a 1 2") == "OK" and ask("CAS a 1 3") == "FAIL mismatch" and ask("GET a") == "OK 2"
        assert ask("APPEND l 5") == "OK" and ask("APPEND l 6") == "OK" and ask("GET l") == "OK 5,6"
        assert ask("GET missing") == "OK nil"
        assert ask("FROB x") == "ERR bad-request" and ask("PUT onlykey") == "ERR bad-request"
        # a follower names the leader's host (the line client reconnects there, same port)
        assert rc.ask(sut, follower, "PUT a 9") == f"ERR not-leader {loopback.node_address(leader)}"
        assert rc.ask(sut, follower, "LEADER") == f"OK {sut.raft_address(leader)}"
        assert set(rc.ask(sut, follower, "MEMBERS").split()[1:]) == {f"{sut.raft_address(n)}/voter" for n in loopback.nodes}
        # the follower learns the last commit index from the leader's next message: let it
        # apply everything before it stops (the apply count below is of what it applied)
        applied = int(sut.status(leader)["applied"])
        wait_until(lambda: int(sut.status(follower).get("applied", 0)) >= applied, 5, "the follower to apply the leader's entries")
        # SIGTERM: raft_close, then the loop drains and the process exits 0
        proc = sut.process(follower)
        assert proc is not None
        sut.stop(follower)
        assert loopback.wait(proc, 1) == 0
        text = rc.log_text(sut, follower)
        assert "signal 15: closing raft" in text and text.endswith(f"[raft-kv {sut.raft_address(follower)}] stopped\n")
        assert ask("PUT b 1") == "OK"  # two of three still commit
        names = {n: Counter(catalogue.name(e.id) for e in r.poll_events()) for n, r in readers.items()}
    finally:
        for r in readers.values():
            r.close()
        teardown_all(sut)
    assert names[leader]["became-leader"] == 1 and names[leader]["client-request"] >= 10
    assert names[leader]["cas-mismatch"] == 1 and names[follower]["cas-mismatch"] == 1  # every node applies
    assert names[follower]["not-leader-reply"] == 1 and names[follower]["shutdown"] == 1
    assert names[follower]["apply"] >= 8 and names[follower]["leader-change"] >= 1


def test_txn_protocol_and_elle_checked_txn_workloads(binary: Path, loopback, tmp_path: Path) -> None:
    """TXN is one log entry: reads see the txn's own earlier mops; a malformed mop refuses
    the whole line. list-append and rw-register through the adapter's txn client check
    strict-serializable under Elle; a follower's redirect is followed."""
    sut = _sut(loopback, binary)
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        assert rc.ask(sut, leader, "TXN r:x a:x:1 a:x:2 r:x w:y:7 r:y r:z") == "OK nil _ _ 1,2 _ 7 nil"
        for bad in ("TXN", "TXN q:x", "TXN r:x:1", "TXN a:x", "TXN a:x:1:2", "TXN r::"):
            assert rc.ask(sut, leader, bad) == "ERR bad-request", bad
        assert rc.ask(sut, leader, "GET x") == "OK 1,2"  # nothing of the refused lines applied
        follower = next(n for n in loopback.nodes if n != leader)
        client = sut.client(follower, make_workload("list-append"))  # key 1000: none of the workloads' below
        client.open()
        try:
            done = client.invoke({"f": "txn", "value": [[APPEND, 1000, 1], [READ, 1000, None]]})
        finally:
            client.close()
        assert done.type == "ok" and done.value == [[APPEND, 1000, 1], [READ, 1000, [1]]]
        for name in ("list-append", "rw-register"):
            run = tmp_path / name
            summary = record_run(sut, make_workload(name), RunConfig(concurrency=3, time_limit=1.5, rate=200), run)
            assert summary.completions["ok"] > 20, summary  # dozens even on a loaded host
            _, history = read_history(run / "history.edn")
            result = check_elle(history, name)
            assert result.valid is True, result.explanation
    finally:
        teardown_all(sut)


def test_snapshots_and_restores_from_one(binary: Path, loopback) -> None:
    """Threshold 8, trailing 4: snapshots every few writes. A stopped node restarts from its
    own snapshot; a killed node that missed more than the trailing entries gets the leader's."""
    sut = _sut(loopback, binary, "--snapshot-threshold", "8", "--snapshot-trailing", "4")
    catalogue = Catalogue.load(catalogue_path(binary))
    readers = {n: RingReader(loopback.shm_name(n), node=n) for n in loopback.nodes}
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        first, second = [n for n in loopback.nodes if n != leader]
        for i in range(30):
            assert rc.ask(sut, leader, f"PUT k{i} {i}") == "OK"
        wait_until(lambda: all(int(rc.status(sut, n).get("snapshot", 0)) >= 16 for n in loopback.nodes), 10, "snapshots everywhere")
        assert all("snapshot taken: " in rc.log_text(sut, n) for n in loopback.nodes)

        sut.stop(first)  # restart: its own snapshot, then the log after it
        sut.start(first)
        sut.wait_ready(first)
        wait_until(lambda: "restored snapshot: " in rc.log_text(sut, first), 10, "a restore on restart")

        sut.kill(second)  # misses 30 entries: the leader has compacted them away
        for i in range(30, 60):
            assert rc.ask(sut, rc.wait_leader(sut), f"PUT k{i} {i}") == "OK"
        sut.start(second)
        sut.wait_ready(second)
        # the library's trace: the install path (not the restore of its own snapshot at start)
        wait_until(lambda: "restored snapshot with last index" in rc.log_text(sut, second), 15, "the installed snapshot")
        assert any("sending snapshot with last index" in rc.log_text(sut, n) for n in (leader, first))
        target = int(rc.status(sut, rc.wait_leader(sut))["applied"])
        wait_until(lambda: int(rc.status(sut, second).get("applied", 0)) >= target, 10, "the restored node to catch up")

        sut.promote(second)  # read everything back through the node that restored
        assert rc.wait_leader(sut) == second
        for i in range(60):
            assert rc.ask(sut, second, f"GET k{i}") == f"OK {i}"
        # the spec's [[log_events]] name what happened, from the library's trace and ours
        names = {n: Counter(rc.log_event_names(sut, rc.log_text(sut, n))) for n in loopback.nodes}
        assert names[first]["libraft-start-from-snapshot"] >= 1 and names[first]["raft-kv-restored-snapshot"] >= 1
        assert names[second]["libraft-install-snapshot"] >= 1
        assert sum(c["libraft-send-snapshot"] for c in names.values()) >= 1
        assert all(c["libraft-take-snapshot"] >= 1 and c["raft-kv-snapshot-taken"] >= 1 for c in names.values())
        assert names[second]["raft-kv-became-leader"] >= 1 and names[second]["libraft-won-election"] >= 1
        # and the annotated FSM callbacks, from the nodes' rings
        code = {n: Counter(catalogue.name(e.id) for e in r.poll_events()) for n, r in readers.items()}
        assert code[first]["restore"] >= 1 and code[second]["restore"] >= 1
        assert all(c["snapshot"] >= 1 and c["snapshot-index-advanced"] >= 1 for c in code.values())
    finally:
        for r in readers.values():
            r.close()
        teardown_all(sut)


def _replicas_agree(sut) -> dict[str, dict[int, str]]:
    """Once every node applied what the leader did: what they applied, compared."""
    target = int(rc.status(sut, rc.wait_leader(sut))["applied"])
    wait_until(lambda: all(int(rc.status(sut, n).get("applied", 0)) >= target for n in sut.backend.nodes), 15,
               "every node to apply the leader's entries")
    digests = sut.applied_digests()
    assert set(digests) == set(sut.backend.nodes), digests
    common = min(min(applied) for applied in digests.values())
    assert all(common in applied for applied in digests.values()), digests  # compared at one index
    assert divergence_findings(digests) == [], digests
    return digests


def test_digest_chains_agree_across_replicas_through_snapshot_restores(binary: Path, loopback) -> None:
    """Snapshots every 8 entries: a stopped node restores its own (the chain comes back from
    it), a killed one that missed the compacted entries gets the leader's (InstallSnapshot,
    the chain with it); after each, every replica's chain agrees at a common index."""
    sut = _sut(loopback, binary, "--snapshot-threshold", "8", "--snapshot-trailing", "4")
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        assert rc.ask(sut, leader, "DIGEST").startswith("OK applied=")
        for i in range(30):
            assert rc.ask(sut, leader, f"PUT k{i} {i}") == "OK"
        digests = _replicas_agree(sut)
        applied, chain = next(iter(digests[leader].items()))
        assert rc.ask(sut, leader, "DIGEST") == f"OK applied={applied} chain={chain}"
        assert rc.ask(sut, leader, f"DIGEST {applied}") == f"OK index={applied} chain={chain}"
        assert rc.ask(sut, leader, "DIGEST 999999") == "ERR not-kept" and rc.ask(sut, leader, "DIGEST x") == "ERR not-kept"

        first, second = [n for n in loopback.nodes if n != leader]
        sut.stop(first)  # its own snapshot on restart
        sut.start(first)
        sut.wait_ready(first)
        wait_until(lambda: "restored snapshot: " in rc.log_text(sut, first), 10, "a restore on restart")
        assert rc.ask(sut, rc.wait_leader(sut), "PUT after-restart 1") == "OK"
        _replicas_agree(sut)

        sut.kill(second)  # misses 30 entries: the leader's snapshot, installed
        for i in range(30, 60):
            assert rc.ask(sut, rc.wait_leader(sut), f"PUT k{i} {i}") == "OK"
        sut.start(second)
        sut.wait_ready(second)
        wait_until(lambda: "restored snapshot with last index" in rc.log_text(sut, second), 15, "the installed snapshot")
        _replicas_agree(sut)
    finally:
        teardown_all(sut)


def test_membership_remove_add_back_roles_and_transfer(binary: Path, loopback) -> None:
    sut = _sut(loopback, binary)
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        assert rc.ask(sut, leader, "PUT m 1") == "OK"
        addresses = {n: sut.raft_address(n) for n in loopback.nodes}

        sut.remove_member(leader)  # the leader itself: leadership moves first
        assert not sut.is_running(leader)
        assert sut.members() == {addresses[n]: "voter" for n in loopback.nodes if n != leader}
        new_leader = rc.wait_leader(sut)
        assert new_leader != leader and rc.ask(sut, new_leader, "PUT m 2") == "OK"

        sut.add_member(leader)  # back, empty, under a fresh raft id: it catches up from the others
        assert sut.members() == {a: "voter" for a in addresses.values()}
        sut.wait_ready(leader)
        fresh = fresh_raft_id(addresses[leader], 1)
        assert "joining: no bootstrap" in rc.log_text(sut, leader) and f"started: id {fresh}," in rc.log_text(sut, leader)
        assert any(f"admin: add {addresses[leader]} as id {fresh}" in rc.log_text(sut, n) for n in loopback.nodes)
        sut.promote(leader)
        assert rc.wait_leader(sut) == leader and rc.ask(sut, leader, "GET m") == "OK 2"

        follower = next(n for n in loopback.nodes if n != leader)
        for role in ("standby", "spare", "voter"):
            assert rc.ask(sut, leader, f"ASSIGN {addresses[follower]} {role}") == "OK"
            assert sut.members()[addresses[follower]] == role
        assert rc.ask(sut, leader, f"ASSIGN {addresses[follower]} voter").startswith("ERR")  # already one
        assert sut.primaries() == [leader]

        sut.remove_member(follower)  # a second removal of one address: another fresh id
        sut.remove_member(leader)  # the leader, whose raft id is the fresh one: found by address
        remaining = next(n for n in loopback.nodes if n not in (leader, follower))
        assert sut.members() == {addresses[remaining]: "voter"}
        for node in (follower, leader):
            sut.add_member(node)
        for node in (follower, leader):
            sut.wait_ready(node)
        assert sut.members() == {a: "voter" for a in addresses.values()}
        assert f"started: id {fresh_raft_id(addresses[leader], 2)}," in rc.log_text(sut, leader)
        assert rc.ask(sut, rc.wait_leader(sut), "GET m") == "OK 2"
    finally:
        teardown_all(sut)


def test_builtin_name_gives_the_membership_adapter(loopback) -> None:
    from mallory.suts.registry import BUILTIN_SUTS, make_adapter

    assert "raft-kv" in BUILTIN_SUTS
    sut = make_adapter("raft-kv", loopback)
    assert isinstance(sut, Membership) and isinstance(sut, Promotable)
    assert Path(sut.command("n1")[0]).exists()  # built on first use


def test_an_add_back_without_quorum_is_finished_by_wait_ready(binary: Path, loopback) -> None:
    """A reset heals membership before it restarts killed nodes: with the others down the
    add-back cannot commit; once they are back, waiting for the node adds it."""
    sut = _sut(loopback, binary)
    try:
        start_all(sut)
        leader = rc.wait_leader(sut)
        removed = next(n for n in loopback.nodes if n != leader)
        sut.remove_member(removed)
        others = [n for n in loopback.nodes if n != removed]
        for node in others:
            sut.kill(node)
        sut.change_timeout = 2.0
        with pytest.raises(MalloryError, match="no single leader"):
            sut.add_member(removed)
        assert sut.is_running(removed)  # started empty, waiting to be added
        sut.change_timeout = 20.0
        for node in others:
            sut.start(node)
        for node in others:
            sut.wait_ready(node)
        sut.wait_ready(removed)
        assert sut.members() == {sut.raft_address(n): "voter" for n in loopback.nodes}
    finally:
        teardown_all(sut)
