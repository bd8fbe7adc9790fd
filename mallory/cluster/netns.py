"""The `netns` cluster backend: a gateway namespace and one namespace per node.

Topology of run RUN with index I (0..49, allocated by mallory.cluster.registry so runs coexist) and
S = 100 + I; everything lives in namespaces this module creates, except one veth end:

    root namespace (harness, `mallory` commands)
      mal<I>c  10.S.0.1/24 ─┐  routes: 10.S.K.0/24 via 10.S.0.2 for every node K (and nothing
                            │  else), so harness traffic to a node crosses the gateway
    mal-RUN-gw (gateway, where the mediator runs; ip_forward=1)
      ctl      10.S.0.2/24 ─┘
      to-n1    10.S.1.1/24 ──── eth0 10.S.1.2/24   mal-RUN-n1   default via 10.S.1.1
      to-n2    10.S.2.1/24 ──── eth0 10.S.2.2/24   mal-RUN-n2   default via 10.S.2.1
      ...      10.S.K.1/24 ──── eth0 10.S.K.2/24   mal-RUN-nK

Each node is alone on its own /24 LAN, so every packet between two nodes is forwarded by
the gateway (its FORWARD hook sees it: that is where the mediator's NFQUEUE sits), and the
node's own INPUT/OUTPUT hooks see it leave and arrive (where the observer's NFQUEUE sits).
GSO, TSO, GRO, LRO and tx checksumming are off on every veth, so the packets are the same
bytes at all three vantage points (same packet id, see mallory/observer/packet.py). One
subtlety, measured: TCP on this kernel builds GSO super-packets whatever the device says
(software GSO), so the sender's OUTPUT hook sees up to 64 KB per skb; NFQUEUE segments
such an skb before queueing it (we do not set NFQA_CFG_F_GSO) and the stack would segment
it before the veth anyway, so the observer, the gateway and the receiver all see the same
MSS-sized segments. (NFLOG does not segment: see mallory/observer/nflog.py.)

For other components the layout is a JSON file, `<state dir>/layout.json`
(`ClusterLayout.load(run)`): gateway namespace, node namespaces, node addresses, the
gateway-side interface and address of each node's link, the control addresses. The
mediator's API listens on `gateway_control_address` (reachable from the host); observers
reach the mediator at their node's `gateway_address`.

Processes: `spawn` runs argv in the node's namespace (`ip netns exec`, which setns()es and
then exec()s, so the pid is the program's) in its own session/process group, with
MALLORY_NODE, MALLORY_SHM and MALLORY_DATA_DIR set, stdout and stderr appended to
`log_dir(node)/<name>.log`; its pid is journaled so `mallory cleanup` finds it after a
`kill -9` of the controller. The pseudo-node "gw" runs a process in the gateway namespace.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from mallory.cluster.backend import NodeProcess
from mallory.cluster.journaled import GATEWAY, JournaledCluster, RunLayout, run_layout
from mallory.cluster.registry import (
    RunRecord,
    cleanup_run,
    load_run,
    register_run,
)
from mallory.errors import MalloryError

log = logging.getLogger(__name__)

MAX_NODES = 250
NODE_INTERFACE = "eth0"
GATEWAY_CONTROL_INTERFACE = "ctl"
OFFLOADS = ["gso", "off", "tso", "off", "gro", "off", "lro", "off", "tx", "off"]


@dataclass(frozen=True)
class NodeLayout:
    name: str  # "n1"
    namespace: str  # "mal-RUN-n1"
    address: str  # the node's address, "10.S.1.2"
    subnet: str  # its LAN, "10.S.1.0/24"
    interface: str  # the node-side veth, "eth0"
    gateway_address: str  # the gateway's address on this LAN, "10.S.1.1"
    gateway_interface: str  # the gateway-side veth, "to-n1"


@dataclass(frozen=True)
class ClusterLayout(RunLayout[NodeLayout]):
    node_type = NodeLayout

    run: str
    index: int
    gateway_namespace: str
    host_interface: str  # root-namespace end of the control veth
    host_address: str  # 10.S.0.1
    gateway_control_interface: str  # "ctl"
    gateway_control_address: str  # 10.S.0.2: the mediator's API
    control_subnet: str  # 10.S.0.0/24
    supernet: str  # 10.S.0.0/16: every address of the run
    nodes: tuple[NodeLayout, ...]

    @classmethod
    def plan(cls, run: str, index: int, count: int) -> "ClusterLayout":
        if not 1 <= count <= MAX_NODES:
            raise MalloryError(f"--nodes {count}: a cluster has 1..{MAX_NODES} nodes")
        s = 100 + index
        nodes = tuple(
            NodeLayout(
                name=f"n{k}",
                namespace=f"mal-{run}-n{k}",
                address=f"10.{s}.{k}.2",
                subnet=f"10.{s}.{k}.0/24",
                interface=NODE_INTERFACE,
                gateway_address=f"10.{s}.{k}.1",
                gateway_interface=f"to-n{k}",
            )
            for k in range(1, count + 1)
        )
        return cls(
            run=run,
            index=index,
            gateway_namespace=f"mal-{run}-gw",
            host_interface=f"mal{index}c",  # see _host_link_exists
            host_address=f"10.{s}.0.1",
            gateway_control_interface=GATEWAY_CONTROL_INTERFACE,
            gateway_control_address=f"10.{s}.0.2",
            control_subnet=f"10.{s}.0.0/24",
            supernet=f"10.{s}.0.0/16",
            nodes=nodes,
        )

    def _owner(self) -> str:
        return f"run {self.run!r}"

    def node_of_address(self, address: str) -> str | None:
        """The node owning an address of the run (its own address), None otherwise."""
        for node in self.nodes:
            if node.address == address:
                return node.name
        return None

    @classmethod
    def load(cls, run: str) -> "ClusterLayout":
        path = load_run(run).layout_path
        try:
            return cls.from_json(path.read_text())
        except FileNotFoundError:
            raise MalloryError(f"run {run!r} has no layout ({path}): it did not finish coming up") from None


def _host_link_exists(index: int) -> bool:
    return Path(f"/sys/class/net/mal{index}c").exists()


def _sh(argv: Sequence[str], what: str) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True)
    if result.returncode != 0:
        raise MalloryError(f"{what}: `{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
    return result.stdout


class NetnsCluster(JournaledCluster):
    """A cluster of network namespaces (see the module docstring); implements
    mallory.cluster.backend.ClusterBackend."""

    name = "netns"

    def __init__(self, record: RunRecord, layout: ClusterLayout) -> None:
        self.record = record
        self.layout = layout
        self._children: dict[int, tuple[int | None, subprocess.Popen]] = {}  # pid -> (start ticks, child)

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def up(cls, run: str, nodes: int, *, state_root: Path | None = None, data_root: Path | None = None) -> "NetnsCluster":
        """Create the run: register it, then build namespaces, links and routes, journaling
        each before creating it. On any failure everything created so far is removed."""
        if not 1 <= nodes <= MAX_NODES:
            raise MalloryError(f"--nodes {nodes}: a cluster has 1..{MAX_NODES} nodes")
        record = register_run(run, state_root, data_root, index_free=lambda i: not _host_link_exists(i))
        log.info("creating cluster %s: a gateway and %d node network namespaces, links, routes", run, nodes)
        try:
            layout = ClusterLayout.plan(run, record.index, nodes)
            cluster = cls(record, layout)
            cluster._build()
            record.layout_path.write_text(layout.to_json())
            return cluster
        except BaseException:
            cleanup_run(record)
            raise

    @classmethod
    def attach(cls, run: str, *, state_root: Path | None = None) -> "NetnsCluster":
        """A handle on a run that is already up (created by another process)."""
        record = load_run(run, state_root)
        return cls(record, run_layout(record, ClusterLayout))

    def _build(self) -> None:
        lay, rec = self.layout, self.record
        self._make_places()
        for node in lay.nodes:
            rec.record(shm=self.shm_name(node.name))

        gw = lay.gateway_namespace
        self._add_netns(gw)
        _sh(["ip", "netns", "exec", gw, "sysctl", "-qw", "net.ipv4.ip_forward=1"], "gateway forwarding")

        rec.record(link=lay.host_interface)
        _sh(
            ["ip", "link", "add", lay.host_interface, "type", "veth", "peer", "name", lay.gateway_control_interface, "netns", gw],
            "control link",
        )
        _sh(["ip", "addr", "add", f"{lay.host_address}/24", "dev", lay.host_interface], "control link")
        _sh(["ip", "link", "set", lay.host_interface, "up"], "control link")
        _sh(["ethtool", "-K", lay.host_interface, *OFFLOADS], "offloads")
        self._configure_end(gw, lay.gateway_control_interface, f"{lay.gateway_control_address}/24")

        for node in lay.nodes:
            self._add_netns(node.namespace)
            _sh(
                ["ip", "-n", gw, "link", "add", node.gateway_interface, "type", "veth",
                 "peer", "name", node.interface, "netns", node.namespace],
                f"link of {node.name}",
            )
            self._configure_end(gw, node.gateway_interface, f"{node.gateway_address}/24")
            self._configure_end(node.namespace, node.interface, f"{node.address}/24")
            _sh(["ip", "-n", node.namespace, "route", "add", "default", "via", node.gateway_address], f"route of {node.name}")
            _sh(["ip", "route", "add", node.subnet, "via", lay.gateway_control_address], f"host route to {node.name}")

    def _add_netns(self, ns: str) -> None:
        self.record.record(netns=ns)
        _sh(["ip", "netns", "add", ns], f"namespace {ns}")
        _sh(["ip", "-n", ns, "link", "set", "lo", "up"], f"namespace {ns}")

    @staticmethod
    def _configure_end(ns: str, dev: str, cidr: str) -> None:
        _sh(["ip", "-n", ns, "addr", "add", cidr, "dev", dev], f"address of {dev} in {ns}")
        _sh(["ip", "-n", ns, "link", "set", dev, "up"], f"link {dev} in {ns}")
        _sh(["ip", "netns", "exec", ns, "ethtool", "-K", dev, *OFFLOADS], f"offloads of {dev} in {ns}")

    # -- addresses and places ----------------------------------------------------------

    @property
    def run(self) -> str:
        return self.layout.run

    def namespace(self, node: str) -> str:
        if node == GATEWAY:
            return self.layout.gateway_namespace
        return self.layout.node(node).namespace

    # -- processes ---------------------------------------------------------------------

    def exec(self, node: str, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run a short command inside a node (or "gw") to completion, output captured."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.namespace(node), *argv], capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise MalloryError(f"{node}: `{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def spawn(
        self,
        node: str,
        argv: Sequence[str],
        *,
        name: str = "sut",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> NodeProcess:
        ns = self.namespace(node)
        self._check_name_free(node, name)
        full_env = self._node_env(node, {**os.environ, **(env or {})})
        log_path = self.log_dir(node) / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", ns, *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
            )
        proc = self._journal(node, name, popen.pid, log_path)
        self._children[popen.pid] = (proc.start, popen)
        return proc

    def signal(self, proc: NodeProcess, signum: int) -> None:
        self._kill(proc, signum, group=True)

    def _child(self, proc: NodeProcess) -> subprocess.Popen | None:
        """The Popen of `proc` if this controller spawned it (not of a later child that the
        kernel gave the same pid)."""
        start, popen = self._children.get(proc.pid, (None, None))
        return popen if popen is not None and start == proc.start else None

    def is_running(self, proc: NodeProcess) -> bool:
        child = self._child(proc)
        if child is not None and child.poll() is not None:
            return False
        return super().is_running(proc)

    def wait(self, proc: NodeProcess, timeout: float) -> int | None:
        """The exit status (negative signal number if killed by one), None on timeout.
        For a process another controller spawned the status is unknowable: -1 once gone."""
        child = self._child(proc)
        if child is not None:
            try:
                return child.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        return -1 if self._wait_gone(proc, timeout) else None

    def subnets(self) -> list[str]:
        """The node LANs, e.g. for an observer's --watch."""
        return [n.subnet for n in self.layout.nodes]
