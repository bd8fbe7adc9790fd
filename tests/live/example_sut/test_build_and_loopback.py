"""The example SUT without root: built with mallory-cc (its catalogue names every
annotation), run as a 3-node cluster on loopback through the shipped spec, the register
workload's history checks linearizable, and the annotated events arrive in each node's
shm ring by name; a killed or paused leader is replaced and the cluster serves again."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.spec import load_spec
from mallory.harness.workload import RegisterWorkload
from mallory.history.ops import read_history
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.instrument.event_ids import event_id
from mallory.observer.ring import RingReader
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.logs import scan_log
from mallory.oracles.models import CasRegister
from mallory.polling import wait_until
from tests.live.example_sut import example_cluster as ex
from tests.live.stack import loopback_with_rings

pytestmark = pytest.mark.timeout(180)


def test_catalogue_names_every_annotation(binary: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(binary))
    labels = Counter(e.label for e in catalogue)
    assert set(labels) == ex.LABELS and set(labels.values()) == {1}
    source = (ex.SUT_DIR / "example_sut.c").read_text().splitlines()
    for event in catalogue:
        assert event.file == "suts/example/example_sut.c"  # relative to the repository: stable ids
        assert event.id == event_id(event.file, event.line, event.kind)
        above = [line.strip() for line in source[: event.line - 1] if line.strip()][-1]
        assert above == f"// INSTRUMENT_{event.kind} {event.label}", (event, above)


def test_the_bugs_spec_is_the_plain_spec_with_every_bug_on() -> None:
    plain, bugs = load_spec(ex.SPEC), load_spec(ex.SUT_DIR / "example-bugs.toml")
    assert bugs.command == (*plain.command, "--bugs", "all")
    assert (bugs.ports, bugs.ready, bugs.client) == (plain.ports, plain.ready, plain.client)
    assert plain.client is not None and plain.client.kind == "line"
    assert plain.command[0] == str(ex.SUT_DIR / "build" / "example-sut")  # relative to the spec file


def test_unknown_bug_names_are_refused(binary: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(binary), "--listen", "127.0.0.1", "--client-port", "1", "--peer-port", "2", "--data", str(tmp_path), "--bugs", "typo"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert result.returncode == 2 and "unknown seeded bug typo" in result.stderr


@pytest.fixture
def loopback(tmp_path: Path):
    with loopback_with_rings(root=tmp_path / "cluster") as backend:  # logs stay for a failure's post-mortem
        yield backend


def _names(catalogue: Catalogue, reader: RingReader) -> Counter:
    return Counter(catalogue.name(e.id) for e in reader.poll_events())


def test_register_workload_is_linearizable_and_events_reach_the_rings(binary: Path, loopback, tmp_path: Path) -> None:
    sut = ex.adapter(loopback, binary)
    catalogue = Catalogue.load(catalogue_path(binary))
    readers = {n: RingReader(loopback.shm_name(n), node=n) for n in loopback.nodes}
    try:
        start_all(sut)
        leader = ex.wait_leader(sut)
        # 400 ops, however long a busy machine takes (the time limit only bounds a hang);
        # reads and writes (2 in 3) cannot fail on a healthy cluster, a cas succeeds 1 in 5
        config = RunConfig(concurrency=4, time_limit=120.0, rate=400, op_limit=400)
        summary = record_run(sut, RegisterWorkload(), config, tmp_path / "run")
        assert summary.invokes == 400 and summary.completions["ok"] > 200, summary
        _, history = read_history(tmp_path / "run" / "history.edn")
        result = check_linearizable(history, CasRegister())
        assert result.valid is True, result.explanation
        names = {n: _names(catalogue, r) for n, r in readers.items()}
    finally:
        for r in readers.values():
            r.close()
        teardown_all(sut)
    assert names[leader]["became-leader"] == 1 and names[leader]["election-started"] >= 1  # split votes happen
    assert names[leader]["client-request"] > 100 and names[leader]["replicate"] > 100 and names[leader]["commit"] > 100
    for node in loopback.nodes:
        assert names[node]["apply"] >= summary.completions["ok"] // 2  # every node applies the log
        if node != leader:
            assert names[node]["append-received"] > 100 and names[node]["became-leader"] == 0


def _peer_connections(port: int) -> set[tuple[str, str]]:
    """(local, remote) addresses of the established TCP connections to `port`, from
    /proc/net/tcp (addresses there are hex, little-endian)."""
    def address(field: str) -> tuple[str, int]:
        ip, hex_port = field.split(":")
        return ".".join(str(int(ip[i : i + 2], 16)) for i in (6, 4, 2, 0)), int(hex_port, 16)

    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        (local_ip, local_port), (remote_ip, _) = address(local), address(remote)
        if state == "01" and local_port == port:
            found.add((local_ip, remote_ip))
    return found


def test_each_peer_connects_from_its_own_address(binary: Path, loopback) -> None:
    """Nodes tell peers apart by source address (one inbound connection each); on loopback
    every node must therefore connect from its own 127.0.0.x, not the kernel's 127.0.0.1."""
    sut = ex.adapter(loopback, binary)
    addresses = {loopback.node_address(n) for n in loopback.nodes}
    expected = {(a, b) for a in addresses for b in addresses if a != b}
    try:
        start_all(sut)
        ex.wait_leader(sut)
        wait_until(lambda: _peer_connections(7001) >= expected, 5, "a connection between every two nodes")
        assert {pair for pair in _peer_connections(7001) if pair[0] in addresses} == expected
    finally:
        teardown_all(sut)


def test_killed_or_paused_leader_is_replaced_and_the_cluster_recovers(binary: Path, loopback, tmp_path: Path) -> None:
    sut = ex.adapter(loopback, binary)
    try:
        start_all(sut)
        first = ex.wait_leader(sut)
        assert ex.request(loopback.client_address(first), "PUT x 1").startswith("OK")
        sut.kill(first)
        second = ex.wait_leader(sut, 10)
        assert second != first
        assert ex.request(loopback.client_address(second), "GET x") == "OK 1"
        sut.start(first)  # restarts from its persisted term, vote and log
        sut.wait_ready(first)
        assert ex.request(loopback.client_address(second), "CAS x 1 2") == "OK"
        sut.pause(second)
        third = ex.wait_leader(sut, 10)
        assert third != second
        assert ex.request(loopback.client_address(third), "GET x") == "OK 2"
        sut.resume(second)
        wait_until(lambda: "following leader" in ex.log_text(sut, second).rsplit("stalled for", 1)[-1], 10, "the resumed node to follow")
        # until it redirects to the new leader it may time out or answer UNKNOWN, never serve the read itself
        answers = []
        redirect = f"ERR not-leader {loopback.client_address(third)}"
        wait_until(lambda: answers.append(ex.request(loopback.client_address(second), "GET x")) or answers[-1] == redirect,
                   10, "the resumed node to redirect to the new leader")
        assert not [a for a in answers if a.startswith("OK")], answers
        assert ex.leaders(sut) == [third]
        for node in loopback.nodes:
            assert scan_log(ex.log_text(sut, node).splitlines(), node) == []
    finally:
        teardown_all(sut)


def test_a_torn_log_line_is_dropped_on_restart(binary: Path, tmp_path: Path) -> None:
    """A write cut short (no newline) was never acknowledged: the node restarts without it
    and rewrites its log clean, so the next append starts on a fresh line."""
    (tmp_path / "raft.state").write_text("3 -\n")
    (tmp_path / "raft.log").write_text("1,P,x,5,-\n2,C,x,6,5\n3,P,x,7")
    port = ex.free_port()
    proc = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1", "--client-port", str(port), "--peer-port", str(ex.free_port()), "--data", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert "restored 2 log entries" in proc.stdout.readline()
        wait_until(lambda: ex.request("127.0.0.1", "GET x", port=port) == "OK 6", 10, "the single node to lead and apply")
        assert ex.request("127.0.0.1", "PUT x 8", port=port) == "OK"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    lines = (tmp_path / "raft.log").read_text().splitlines()
    assert lines[:2] == ["1,P,x,5,-", "2,C,x,6,5"] and lines[-1] == "4,P,x,8,-" and all(line.count(",") == 4 for line in lines)
    assert (tmp_path / "raft.state").read_text().split()[0] == "4"  # it voted for itself in term 4
