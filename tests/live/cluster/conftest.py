"""Fixtures for the cluster tests: runs with unique names, always cleaned up, and a
snapshot of what a run may leave behind (namespaces, links, iptables, shm, processes)."""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from mallory.cluster.netns import NetnsCluster
from mallory.cluster.registry import cleanup_run, load_run, proc_state
from mallory.errors import MalloryError


def run_name(tag: str) -> str:
    return f"t{tag}-{uuid.uuid4().hex[:6]}"


@dataclass
class Leftovers:
    """Everything of a run still present on the machine."""

    netns: list[str]
    links: list[str]
    iptables: dict[str, list[str]]  # namespace ("" = root) -> lines mentioning the run
    shm: list[str]
    processes: list[int]

    def empty(self) -> bool:
        return not (self.netns or self.links or self.iptables or self.shm or self.processes)


def _sh(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout


def leftovers(run: str, host_link: str, addresses_prefix: str, pids: list[int]) -> Leftovers:
    """What of run `run` remains: its namespaces, its host link, iptables lines naming its
    addresses in the root and in every remaining namespace (other runs, e.g. of other
    tests, may have observer chains of their own: only our addresses count there), any
    Mallory chain or NFQUEUE rule in the root or in the run's namespaces, its shm
    segments, and which of `pids` still run."""
    netns = [line.split()[0] for line in _sh(["ip", "-o", "netns", "list"]).splitlines() if line.strip()]
    mine = [ns for ns in netns if ns.startswith(f"mal-{run}-")]
    links = [line for line in _sh(["ip", "-o", "link", "show"]).splitlines() if f" {host_link}@" in line or f" {host_link}:" in line]
    iptables: dict[str, list[str]] = {}
    for ns in ["", *netns]:
        argv = ["iptables-save"] if not ns else ["ip", "netns", "exec", ns, "iptables-save"]
        lines = [
            line
            for line in _sh(argv).splitlines()
            if addresses_prefix in line
            or ((ns in mine or not ns) and ("MALLORY" in line or "NFQUEUE" in line))
        ]
        if lines:
            iptables[ns] = lines
    shm = [p.name for p in Path("/dev/shm").glob(f"mallory-{run}-*")]
    # A zombie is dead: it waits only for its parent (often this very test process) to reap it.
    alive = [pid for pid in pids if proc_state(pid) not in (None, "Z")]
    return Leftovers(mine, links, iptables, shm, alive)



@pytest.fixture
def make_cluster(tmp_path):
    """Factory: make_cluster(nodes, tag) -> NetnsCluster; every run is removed afterwards."""
    names: list[str] = []

    def make(nodes: int = 3, tag: str = "c") -> NetnsCluster:
        name = run_name(tag)
        names.append(name)
        return NetnsCluster.up(name, nodes, data_root=tmp_path / "data")

    yield make
    for name in names:
        try:
            cleanup_run(load_run(name))
        except MalloryError:
            pass  # already down
