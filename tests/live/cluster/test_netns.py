"""The netns backend: topology, processes, and that nothing of a run outlives it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mallory import paths
from mallory.cluster.netns import ClusterLayout, NetnsCluster
from mallory.cluster.registry import load_run
from mallory.errors import MalloryError

from .conftest import leftovers, run_name

REPO = paths.HOME


def _prefix(cluster: NetnsCluster) -> str:
    return f"10.{100 + cluster.layout.index}."


def _populate(cluster: NetnsCluster) -> list[int]:
    """Give the run what the observer and the mediator would add: processes in every
    namespace, shm segments, NFQUEUE rules in the nodes and the gateway."""
    pids = []
    for node in [*cluster.nodes, "gw"]:
        pids.append(cluster.spawn(node, ["sleep", "300"], name="sleeper").pid)
        rule = ["iptables", "-w", "-A", "OUTPUT", "-d", cluster.layout.supernet, "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"]
        cluster.exec(node, rule)
    for node in cluster.nodes:
        Path("/dev/shm", cluster.shm_name(node).lstrip("/")).write_bytes(b"\0" * 4096)
    return pids


def test_up_down_leaves_nothing(make_cluster):
    cluster = make_cluster(3, "ud")
    run, link, prefix = cluster.run, cluster.layout.host_interface, _prefix(cluster)
    pids = _populate(cluster)
    before = leftovers(run, link, prefix, pids)
    assert len(before.netns) == 4 and before.links and before.shm and len(before.processes) == 4
    assert len(before.iptables) == 4  # the rules we added in the gateway and the 3 nodes

    out = subprocess.run(
        [sys.executable, "-m", "mallory.cli", "cluster", "down", run], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    after = leftovers(run, link, prefix, pids)
    assert after.empty(), after
    assert not cluster.record.state_dir.exists()
    assert not (cluster.record.run_dir / "data").exists()
    assert (cluster.record.run_dir / "logs" / "n1" / "sleeper.log").exists()  # logs are kept


CONTROLLER = """
import sys, time
from pathlib import Path
from mallory.cluster.netns import NetnsCluster
c = NetnsCluster.up(sys.argv[1], 3, data_root=Path(sys.argv[2]))
for node in [*c.nodes, "gw"]:
    c.spawn(node, ["sleep", "300"], name="sleeper")
# Real observers: each creates its node's shm ring and iptables rules (its mediator is
# away: it buffers).
for node in c.nodes:
    c.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", c.run, "--mediator", "127.0.0.1:9"],
            name="observer")
deadline = time.monotonic() + 20
while not all(Path("/dev/shm", c.shm_name(n).lstrip("/")).exists() for n in c.nodes) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)
print(c.layout.index, " ".join(str(p.pid) for p in c.processes()), flush=True)
time.sleep(300)
"""


def test_kill9_of_the_controller_then_cleanup_leaves_nothing(tmp_path):
    run = run_name("k9")
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, run, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        index, *pids = controller.stdout.readline().split()
    finally:
        controller.kill()  # SIGKILL: no cleanup of its own
        controller.wait()
    pids = [int(p) for p in pids]
    prefix, link = f"10.{100 + int(index)}.", f"mal{index}c"
    before = leftovers(run, link, prefix, pids)
    assert len(before.processes) == 7  # sleepers and observers outlive it
    assert len(before.shm) == 3 and len(before.iptables) == 3  # rings and observer rules

    out = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    after = leftovers(run, link, prefix, pids)
    assert after.empty(), after
    with pytest.raises(MalloryError):
        load_run(run)


#: `ip` for a `mallory cluster up` under test: the call whose arguments match $STOP_AT (a
#: glob) writes its pid to $STOPPED and waits there, before doing anything, to be killed.
STOPPING_IP = """#!/bin/sh
case "$*" in
  $STOP_AT) echo $$ > "$STOPPED.tmp" && mv "$STOPPED.tmp" "$STOPPED" && exec sleep 600 ;;
esac
exec {ip} "$@"
"""
#: Points of `cluster up` (mallory/cluster/netns.py `_build`): the `ip` call it is stopped
#: in, the namespaces (by suffix) made by then, and whether the control link is.
UP_STAGES = {
    "registered": ("netns add mal-{run}-gw", [], False),
    "gateway namespace made": ("netns exec mal-{run}-gw sysctl *", ["gw"], False),
    "control link made": ("addr add * dev mal*c", ["gw"], True),
    "third node's namespace made": ("-n mal-{run}-gw link add to-n3 *", ["gw", "n1", "n2", "n3"], True),
}


@pytest.mark.parametrize("stage", UP_STAGES)
def test_kill9_during_cluster_up_then_cleanup_leaves_nothing(tmp_path, stage):
    """The journal is written before each thing is created, so a kill at any point of
    `cluster up` leaves nothing that cleanup does not know about. `up` is stopped in a
    chosen `ip` call (a stand-in for `ip` first on its PATH), so the kill lands there."""
    run = run_name("ku")
    stop_at, namespaces, link = UP_STAGES[stage]
    bin_dir, stopped = tmp_path / "bin", tmp_path / "stopped"
    bin_dir.mkdir()
    (bin_dir / "ip").write_text(STOPPING_IP.format(ip=shutil.which("ip")))
    (bin_dir / "ip").chmod(0o755)
    env = {**os.environ, "MALLORY_DATA_ROOT": str(tmp_path / "data"), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "STOP_AT": stop_at.format(run=run), "STOPPED": str(stopped)}
    up = subprocess.Popen([sys.executable, "-m", "mallory.cli", "cluster", "up", "--nodes", "5", "--name", run],
                          cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    held = None
    try:
        deadline = time.monotonic() + 60
        while not stopped.exists():
            assert up.poll() is None, f"cluster up ended before {stage}: {up.stderr.read()}"
            assert time.monotonic() < deadline, f"cluster up did not get to {stage}"
            time.sleep(0.02)
        held = int(stopped.read_text())
    finally:
        up.kill()
        up.wait()
        if held is not None:
            os.kill(held, signal.SIGKILL)
    record = load_run(run)  # registered, with its owner now gone
    index, data = record.index, record.run_dir / "data"
    journaled = {e["netns"] for e in record.entries() if "netns" in e}
    before = leftovers(run, f"mal{index}c", f"10.{100 + index}.", [])
    assert sorted(before.netns) == sorted(f"mal-{run}-{ns}" for ns in namespaces), before
    assert bool(before.links) == link and data.is_dir(), before
    assert f"mal-{run}-gw" in journaled and set(before.netns) <= journaled  # each journaled before it was made

    out = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    after = leftovers(run, f"mal{index}c", f"10.{100 + index}.", [])
    assert after.empty(), after
    assert not data.exists()
    with pytest.raises(MalloryError):
        load_run(run)


def _forward_count(cluster: NetnsCluster, src: str, dst: str) -> int:
    out = cluster.exec("gw", ["iptables", "-w", "-nvxL", "FORWARD"]).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].isdigit() and f[-2:] == [src, dst]:
            return int(f[0])
    raise AssertionError(f"no counting rule {src} -> {dst}:\n{out}")


def test_node_to_node_and_host_to_node_traffic_crosses_the_gateway(make_cluster):
    cluster = make_cluster(3, "gw")
    lay = cluster.layout
    n1, n2 = lay.node("n1"), lay.node("n2")
    for src, dst in [(n1.address, n2.address), (lay.host_address, n2.address)]:
        cluster.exec("gw", ["iptables", "-w", "-A", "FORWARD", "-s", src, "-d", dst, "-p", "tcp"])
    server = cluster.spawn("n2", [sys.executable, "-c", ECHO, "9000", "2"], name="echo")
    _wait_listening(cluster, "n2", 9000)

    reply = cluster.exec("n1", [sys.executable, "-c", CLIENT, n2.address, "9000"]).stdout
    assert reply.strip() == "HELLO"
    assert _forward_count(cluster, n1.address, n2.address) >= 3  # SYN, data, ACK, FIN...

    with socket.create_connection((cluster.client_address("n2"), 9000), timeout=5) as s:
        s.sendall(b"hello")
        assert s.recv(100) == b"HELLO"
    assert _forward_count(cluster, lay.host_address, n2.address) >= 3
    assert cluster.wait(server, 5) == 0

    # The host reaches only the run's node LANs through its control link, nothing else.
    routes = subprocess.run(["ip", "route", "show", "dev", lay.host_interface], capture_output=True, text=True).stdout
    assert sorted(line.split()[0] for line in routes.splitlines()) == sorted([lay.control_subnet, *(n.subnet for n in lay.nodes)])


ECHO = """
import socket, sys
s = socket.create_server(("0.0.0.0", int(sys.argv[1])))
for _ in range(int(sys.argv[2])):
    c, _ = s.accept()
    c.sendall(c.recv(100).upper())
    c.close()
"""
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"hello")
print(s.recv(100).decode())
"""


def _wait_listening(cluster: NetnsCluster, node: str, port: int, timeout: float = 10.0, udp: bool = False) -> None:
    """Until something listens on the node's TCP port (a UDP socket is bound to it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f":{port} " in cluster.exec(node, ["ss", "-Hlun" if udp else "-Hltn"]).stdout:
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {node}:{port}")


def test_spawn_environment_logs_signals_and_wait(make_cluster):
    cluster = make_cluster(2, "sp")
    proc = cluster.spawn(
        "n1",
        ["sh", "-c", 'echo "$MALLORY_NODE $MALLORY_SHM $MALLORY_DATA_DIR $EXTRA"; ip -4 -o addr show eth0'],
        name="env",
        env={"EXTRA": "x1"},
    )
    assert cluster.wait(proc, 10) == 0
    first, addr = proc.log_path.read_text().splitlines()
    assert first == f"n1 {cluster.shm_name('n1')} {cluster.data_dir('n1')} x1"
    assert f"{cluster.node_address('n1')}/24" in addr
    cluster.spawn("n1", ["sh", "-c", "echo again"], name="env")
    time.sleep(0.3)
    assert proc.log_path.read_text().splitlines()[-1] == "again"  # appended

    sleeper = cluster.spawn("n2", ["sleep", "60"], name="sleeper")
    with pytest.raises(MalloryError):
        cluster.spawn("n2", ["sleep", "60"], name="sleeper")  # names are unique per node
    assert os.getpgid(sleeper.pid) == sleeper.pid  # own process group
    cluster.signal(sleeper, signal.SIGSTOP)
    time.sleep(0.1)
    assert cluster.is_running(sleeper)  # a stopped process is running
    assert Path(f"/proc/{sleeper.pid}/stat").read_text().split(") ")[1][0] == "T"
    cluster.signal(sleeper, signal.SIGKILL)
    assert cluster.wait(sleeper, 5) == -signal.SIGKILL
    assert not cluster.is_running(sleeper)

    other = NetnsCluster.attach(cluster.run)  # a second controller sees the same processes
    assert {(p.node, p.name) for p in other.processes()} >= {("n1", "env"), ("n2", "sleeper")}
    with pytest.raises(MalloryError):
        cluster.spawn("n9", ["true"])


def test_two_runs_coexist_with_disjoint_addresses(make_cluster):
    a, b = make_cluster(2, "ra"), make_cluster(2, "rb")
    assert a.layout.index != b.layout.index
    assert not {n.address for n in a.layout.nodes} & {n.address for n in b.layout.nodes}
    for cluster in (a, b):
        n2 = cluster.node_address("n2")
        assert cluster.exec("n1", ["ping", "-c1", "-W2", n2]).returncode == 0
        assert subprocess.run(["ping", "-c1", "-W2", n2], capture_output=True).returncode == 0
    # b's nodes are not reachable from a's nodes: each run is its own world.
    assert a.exec("n1", ["ping", "-c1", "-W1", b.node_address("n2")], check=False).returncode != 0
    layout = ClusterLayout.load(a.run)
    assert layout == a.layout and ClusterLayout.from_json(layout.to_json()) == layout
    with pytest.raises(MalloryError):
        NetnsCluster.up(a.run, 2)  # the name is taken


def test_offloads_are_off_on_every_veth(make_cluster):
    cluster = make_cluster(2, "of")
    ends = [("gw", cluster.layout.gateway_control_interface)]
    ends += [("gw", n.gateway_interface) for n in cluster.layout.nodes]
    ends += [(n.name, n.interface) for n in cluster.layout.nodes]
    for node, dev in ends:
        features = cluster.exec(node, ["ethtool", "-k", dev]).stdout
        for feature in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload", "large-receive-offload"):
            assert f"{feature}: off" in features, (node, dev, feature)


@pytest.mark.parametrize("fail_at", [3, 9, 20])
def test_a_failure_during_up_removes_what_was_created(tmp_path, monkeypatch, fail_at):
    import mallory.cluster.netns as netns

    real_sh, calls = netns._sh, []

    def failing_sh(argv, what):
        calls.append(argv)
        if len(calls) == fail_at:
            raise MalloryError(f"injected failure at step {fail_at}")
        return real_sh(argv, what)

    monkeypatch.setattr(netns, "_sh", failing_sh)
    run = run_name("fu")
    with pytest.raises(MalloryError, match="injected"):
        NetnsCluster.up(run, 3, data_root=tmp_path)
    with pytest.raises(MalloryError):
        load_run(run)  # unregistered
    assert not leftovers(run, "-", "-", []).netns
    host_links = [argv[3] for argv in calls if argv[:3] == ["ip", "link", "add"]]
    assert all(not Path("/sys/class/net", link).exists() for link in host_links)


def test_cleanup_orphans_removes_a_run_whose_registry_was_wiped(make_cluster):
    cluster = make_cluster(2, "or")
    sleeper = cluster.spawn("n1", ["sleep", "300"], name="sleeper")
    run, link = cluster.run, cluster.layout.host_interface
    shutil.rmtree(cluster.record.state_dir)  # the registry is gone, the namespaces are not
    assert len(leftovers(run, link, "-", [sleeper.pid]).netns) == 3
    out = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", "--orphans", "-v"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    after = leftovers(run, link, "-", [sleeper.pid])
    assert not after.netns and not after.links and not after.processes, after
