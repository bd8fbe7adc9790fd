"""Pure tests of the cluster pieces that need no root: layout plan, run registry, rules."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mallory.cluster.docker import DockerLayout, DockerNode
from mallory.cluster.netns import ClusterLayout
from mallory.cluster.registry import (
    check_run_name,
    cleanup_run,
    list_runs,
    load_run,
    proc_state,
    processes_using,
    register_run,
)
from mallory.errors import MalloryError
from mallory.observer.iptables import rules_script


def test_layout_gives_every_node_its_own_lan_inside_the_run_supernet():
    lay = ClusterLayout.plan("r", 3, 5)
    supernet = ipaddress.ip_network(lay.supernet)
    subnets = [ipaddress.ip_network(n.subnet) for n in lay.nodes]
    assert len(set(subnets)) == 5 and ipaddress.ip_network(lay.control_subnet) not in subnets
    for node, subnet in zip(lay.nodes, subnets):
        assert subnet.subnet_of(supernet) and subnet.prefixlen == 24
        assert ipaddress.ip_address(node.address) in subnet
        assert ipaddress.ip_address(node.gateway_address) in subnet
        assert node.address != node.gateway_address
        assert node.namespace == f"mal-r-{node.name}"
    assert ipaddress.ip_address(lay.gateway_control_address) in ipaddress.ip_network(lay.control_subnet)
    assert len(lay.host_interface) <= 15  # IFNAMSIZ
    assert ClusterLayout.from_json(lay.to_json()) == lay
    assert lay.node_of_address(lay.node("n4").address) == "n4"
    other = ClusterLayout.plan("s", 4, 5)
    assert not ipaddress.ip_network(other.supernet).overlaps(supernet)
    with pytest.raises(MalloryError, match="run 'r' has no node 'n6'"):
        lay.node("n6")
    with pytest.raises(MalloryError):
        ClusterLayout.plan("r", 0, 0)


def test_docker_layout_round_trips_and_names_its_project_when_a_node_is_missing():
    lay = DockerLayout("p", "m", "10.9.0.2", (DockerNode("n1", "c1", "10.9.1.2", "p_n1", "10.9.1.1"),))
    assert DockerLayout.from_json(lay.to_json()) == lay
    assert lay.names == ["n1"] and lay.node("n1").container == "c1"
    with pytest.raises(MalloryError, match="compose project 'p' has no node 'n2'"):
        lay.node("n2")


@pytest.mark.parametrize("bad", ["", "-x", "UPPER", "a" * 21, "a b", "a/b"])
def test_bad_run_names_are_rejected(bad):
    with pytest.raises(MalloryError):
        check_run_name(bad)


def test_registry_allocates_distinct_indices_and_skips_torn_journal_lines(tmp_path):
    a = register_run("a", tmp_path, tmp_path / "data")
    b = register_run("b", tmp_path, tmp_path / "data", index_free=lambda i: i != 1)
    assert (a.index, b.index) == (0, 2)
    # Round robin: a freed index is not handed out again at once.
    c = register_run("c", tmp_path, tmp_path / "data")
    cleanup_run(c)
    assert register_run("d", tmp_path, tmp_path / "data").index == c.index + 1
    with pytest.raises(MalloryError):
        register_run("a", tmp_path)
    a.record(netns="mal-a-gw")
    with open(a.journal_path, "a") as f:
        f.write('{"netns": "mal-a-n')  # a kill -9 mid-write
    assert a.entries() == [{"netns": "mal-a-gw"}]
    assert load_run("a", tmp_path).index == 0
    assert [r.name for r in list_runs(tmp_path)] == ["a", "b", "d"]
    with pytest.raises(MalloryError):
        load_run("zz", tmp_path)


def test_observer_rules_queue_only_peer_tcp_udp_with_bypass():
    script = rules_script(3, ["10.1.2.2", "10.1.3.2"])
    rules = [line for line in script.splitlines() if line.startswith("-A")]
    assert len(rules) == 8
    assert all("--queue-num 3 --queue-bypass" in r for r in rules)
    assert sum("-d 10.1.2.2" in r for r in rules) == 2 and sum("-s 10.1.3.2" in r for r in rules) == 2
    assert "-I INPUT 1 -j MALLORY-OBS-IN" in script and "-I OUTPUT 1 -j MALLORY-OBS-OUT" in script


@pytest.mark.parametrize(
    "argv, message",
    [
        (["cluster", "up", "--nodes", "3", "--name", "Bad Name"], "run name 'Bad Name'"),
        (["cluster", "up", "--nodes", "0", "--name", "ok"], "--nodes 0"),
        (["cluster", "down", "no-such-run-xyz"], "no run named 'no-such-run-xyz'"),
        (["observe", "--node", "n1"], "no mediator address"),
        (["observe"], "no node name"),
        (["cleanup", "no-such-run-xyz"], "no run named no-such-run-xyz"),
    ],
)
def test_cli_rejects_bad_input_with_a_message_and_no_traceback(argv, message, capsys, monkeypatch, tmp_path):
    from mallory.cli import main

    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("MALLORY_NODE", raising=False)
    monkeypatch.delenv("MALLORY_SHM", raising=False)
    assert main(argv) == 254
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_cleanup_of_a_run_killed_while_registering(tmp_path, monkeypatch, capsys):
    """A run directory without run.json (killed between mkdir and the write) is still found
    and removed by `mallory cleanup RUN`."""
    from mallory.cli import main

    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path))
    (tmp_path / "half").mkdir()
    assert main(["cleanup", "half"]) == 0
    assert not (tmp_path / "half").exists()


def test_a_loopback_backend_removes_its_nodes_rings():
    from mallory.cluster.loopback import LoopbackBackend
    from mallory.observer.ring import create_ring, shm_path

    backend = LoopbackBackend(2)
    paths = [Path(shm_path(backend.shm_name(n))) for n in backend.nodes]
    for node in backend.nodes:
        create_ring(backend.shm_name(node), 16, exist_ok=True)
    assert all(p.exists() for p in paths)
    backend.destroy()
    assert not any(p.exists() for p in paths)


def test_cleanup_removes_rings_of_dead_loopback_processes_only(tmp_path, monkeypatch, capsys):
    """After a kill -9 of a process that ran a loopback cluster, `mallory cleanup` removes
    its rings; those of a live process stay, and so do names a registered run claims."""
    from mallory.cli import main
    from mallory.cluster.loopback import remove_dead_rings
    from mallory.observer.ring import create_ring, shm_path

    dead_pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout)
    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path))
    register_run("r1", tmp_path, tmp_path / "data")
    names = {"dead": f"/mallory-{dead_pid}-n1", "claimed": f"/mallory-{dead_pid}-n2", "live": f"/mallory-{os.getpid()}-n1"}
    for name in names.values():
        create_ring(name, 16, exist_ok=True)
    try:
        assert main(["cleanup", "r1"]) == 0  # a named run is all that was asked for
        assert all(Path(shm_path(name)).exists() for name in names.values())
        # a netns run may be named like a number: what its journal claims is its own
        assert f"shm {names['dead']}" in remove_dead_rings({names["claimed"]})
        assert Path(shm_path(names["claimed"])).exists()
        assert main(["cleanup", "-v"]) == 0
        assert f"shm {names['claimed']}" in capsys.readouterr().out
        assert not Path(shm_path(names["claimed"])).exists()
        assert Path(shm_path(names["live"])).exists()
    finally:
        for name in names.values():
            Path(shm_path(name)).unlink(missing_ok=True)


def test_attaching_to_a_run_that_never_wrote_its_layout_names_the_cleanup(tmp_path):
    """Both backends: a run registered but killed before its layout was written."""
    from mallory.cluster.docker import DockerCluster
    from mallory.cluster.netns import NetnsCluster

    record = register_run("half-up", tmp_path / "state", tmp_path / "data")
    try:
        for attach in (lambda: NetnsCluster.attach("half-up", state_root=tmp_path / "state"),
                       lambda: DockerCluster.attach("half-up", state_root=tmp_path / "state")):
            with pytest.raises(MalloryError, match=r"run 'half-up' did not finish coming up; `mallory cleanup half-up`"):
                attach()
    finally:
        cleanup_run(record)


#: a parent that names a directory on its command line, a child that does not (as a Ray
#: worker that rewrote its title), and a process that only holds a file under it open (as
#: a Ray worker orphaned by its raylet, writing its log), all waiting until killed
PARENT_AND_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
child.wait()
"""
HOLDER = """
import sys, time
log = open(sys.argv[1], "a")
print("open", flush=True)
time.sleep(60)
"""


def test_cleanup_kills_the_processes_a_uses_entry_names_and_their_descendants(tmp_path):
    record = register_run("c1", tmp_path / "state", tmp_path / "data")
    ray_dir = record.state_dir / "ray"
    record.record(uses=str(ray_dir))
    record.record(dir=str(ray_dir))
    (ray_dir / "logs").mkdir(parents=True)
    parent = subprocess.Popen([sys.executable, "-c", PARENT_AND_CHILD, f"--temp-dir={ray_dir}"],
                              stdout=subprocess.PIPE, text=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ray_dir / "logs" / "worker.out")],
                              stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    try:
        child = int(parent.stdout.readline())
        assert holder.stdout.readline().strip() == "open"
        with open(ray_dir / "logs" / "driver.log", "a"):  # this process's own log: not it, nor its children
            found = {p.pid for p in processes_using(str(ray_dir))}
        assert found == {parent.pid, child, holder.pid}, "by command line, by descent, by an open file"
        removed = cleanup_run(record)
        assert {f"process {pid}" for pid in found} | {f"dir {ray_dir}"} <= set(removed)
        assert all(proc_state(pid) in (None, "Z") for pid in found), "killed (ours reaped)"
        assert bystander.poll() is None, "a command line naming a parent directory only is not the run's"
        assert not record.state_dir.exists()
    finally:
        for proc in (parent, holder, bystander):
            proc.kill()
            proc.wait()
