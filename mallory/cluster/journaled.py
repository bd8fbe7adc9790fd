"""What the netns and docker backends share: a run registered in the run registry
(mallory/cluster/registry.py), whose journal names every process spawned in it, over a layout of
named nodes with one address each.

The places of a node (data, logs, shm ring) follow from the run directory, and a process is
known by its host pid and its start time in the journal, so a pid the kernel reused for a
stranger is never signalled. Each backend keeps what differs: how it starts a process
(`ip netns exec` or a docker exec), how it signals one, and how it learns an exit status.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Generic, Mapping, Self, TypeVar

from mallory.cluster.backend import NodeProcess
from mallory.cluster.registry import (
    RunRecord,
    cleanup_run,
    proc_start_ticks,
    proc_state,
)
from mallory.errors import MalloryError

GATEWAY = "gw"  # pseudo-node: processes in the gateway (a namespace or the mediator container)


Node = TypeVar("Node")
Layout = TypeVar("Layout", bound="RunLayout")


class RunLayout(Generic[Node]):
    """A backend's layout: a frozen dataclass whose `nodes` field is a tuple of `node_type`
    dataclasses, each with a `name` and an `address`; what a run writes to its layout file
    (`to_json`) once it is up and `run_layout` reads back (`from_json`). Subclasses set
    `node_type` and say in `_owner` whose nodes they are (for the error of `node`)."""

    node_type: ClassVar[type]
    nodes: tuple[Node, ...]

    def _owner(self) -> str:
        """Whose nodes these are, e.g. "run 'r1'"."""
        raise NotImplementedError

    def node(self, name: str) -> Node:
        """The node called `name`; MalloryError when there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise MalloryError(f"{self._owner()} has no node {name!r} (nodes: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Self:
        raw = json.loads(text)
        raw["nodes"] = tuple(cls.node_type(**n) for n in raw["nodes"])
        return cls(**raw)


def run_layout(record: RunRecord, layout_type: type[Layout]) -> Layout:
    """The layout (`layout_type.from_json`) a run wrote once it was up."""
    try:
        return layout_type.from_json(record.layout_path.read_text())
    except FileNotFoundError:
        raise MalloryError(f"run {record.name!r} did not finish coming up; `mallory cleanup {record.name}`") from None


class JournaledCluster:
    """Subclasses set `record` (the registered run) and `layout` (a `RunLayout`)."""

    record: RunRecord
    layout: Any
    run: str

    def down(self) -> list[str]:
        """Kill the run's processes and remove what the run created (logs stay)."""
        return cleanup_run(self.record)

    def _make_places(self) -> None:
        """Journal the run's data directory, then make every node's (and the gateway's)
        data and log directories."""
        self.record.record(dir=str(self.record.run_dir / "data"))
        for node in [*self.layout.names, GATEWAY]:
            self.data_dir(node).mkdir(parents=True, exist_ok=True)
            self.log_dir(node).mkdir(parents=True, exist_ok=True)

    # -- addresses and places ----------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return self.layout.names

    def node_address(self, node: str) -> str:
        return self.layout.node(node).address

    def client_address(self, node: str) -> str:
        # The controller reaches the node's own address through the gateway (the route
        # for the node's subnet points at it), never around it.
        return self.layout.node(node).address

    def data_dir(self, node: str) -> Path:
        self._check_node(node)
        return self.record.run_dir / "data" / node

    def log_dir(self, node: str) -> Path:
        self._check_node(node)
        return self.record.run_dir / "logs" / node

    def shm_name(self, node: str) -> str:
        """The node's POSIX shm ring name (MALLORY_SHM; in the node's own /dev/shm on
        docker): the observer creates it."""
        self._check_node(node)
        return f"/mallory-{self.run}-{node}"

    def _check_node(self, node: str) -> None:
        if node != GATEWAY:
            self.layout.node(node)

    # -- processes ---------------------------------------------------------------------

    def _check_name_free(self, node: str, name: str) -> None:
        for proc in self.processes():
            if proc.node == node and proc.name == name and self.is_running(proc):
                raise MalloryError(f"{node} already runs a process named {name!r} (pid {proc.pid})")

    def _node_env(self, node: str, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with the node's MALLORY_NODE, MALLORY_DATA_DIR and (not in the gateway)
        MALLORY_SHM on top."""
        full_env = dict(env)
        full_env["MALLORY_NODE"] = node
        full_env["MALLORY_DATA_DIR"] = str(self.data_dir(node))
        if node != GATEWAY:
            full_env["MALLORY_SHM"] = self.shm_name(node)
        return full_env

    def _journal(self, node: str, name: str, pid: int, log_path: Path, **extra: Any) -> NodeProcess:
        """Record a spawned process in the run's journal (for `mallory cleanup` and other
        controllers); the process."""
        start = proc_start_ticks(pid)
        self.record.record(proc=pid, start=start, node=node, name=name, log=str(log_path), **extra)
        return NodeProcess(node=node, name=name, pid=pid, log_path=log_path, start=start)

    def processes(self) -> list[NodeProcess]:
        """Every process the run has spawned (from the journal, whichever controller did)."""
        return [
            NodeProcess(node=e["node"], name=e["name"], pid=int(e["proc"]), log_path=Path(e["log"]), start=e.get("start"))
            for e in self.record.entries()
            if "proc" in e
        ]

    def _start_ticks(self, proc: NodeProcess) -> int | None:
        """`proc`'s start time: its own, else the journal's for the newest entry of its pid,
        node and name (a process described without it, by another controller)."""
        if proc.start is not None:
            return proc.start
        start = None
        for entry in self.record.entries():
            if entry.get("proc") == proc.pid and entry.get("node") == proc.node and entry.get("name") == proc.name:
                start = entry.get("start")
        return start

    def _same_process(self, proc: NodeProcess) -> bool:
        """The process now at `proc.pid` is `proc`, not a later one given its pid (when its
        start time is unknown, whatever has the pid is taken for it)."""
        start = self._start_ticks(proc)
        return start is None or proc_start_ticks(proc.pid) == start

    def is_running(self, proc: NodeProcess) -> bool:
        """The process exists, is not a zombie, and is the one we started (not a reused pid)."""
        state = proc_state(proc.pid)
        return state is not None and state != "Z" and self._same_process(proc)

    def _wait_gone(self, proc: NodeProcess, timeout: float) -> bool:
        """Poll until the process is no longer running; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.is_running(proc):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _kill(self, proc: NodeProcess, signum: int, group: bool) -> None:
        """Send `signum` to our process (its process group first when `group`); nothing
        when it has exited and its pid went to a stranger."""
        if not self._same_process(proc):
            return
        if group:
            try:
                os.killpg(proc.pid, signum)
                return
            except ProcessLookupError:
                pass
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            pass
