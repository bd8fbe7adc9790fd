"""The contract between SUT adapters (mallory/harness) and cluster backends (netns, docker).

A backend owns the machines: it brings nodes up, runs processes inside a node with the
node's environment, captures their output to per-node log files, signals them, and knows
the addresses. An adapter owns the system under test: which commands to run, when it is
ready, how to talk to it. Adapters only ever touch nodes through this protocol, so the same
adapter runs on network namespaces and on docker.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence


@dataclass(frozen=True)
class NodeProcess:
    """A process a backend started inside a node."""

    node: str
    name: str  # e.g. "sut", "sentinel", "observer": unique per node
    pid: int  # pid as seen from the controller (root pid namespace for netns)
    log_path: Path  # stdout and stderr, appended
    #: its start time (clock ticks since boot, /proc/PID/stat), which tells it from a later
    #: process the kernel gives the same pid (pid_max can be 32768: pids come round within
    #: a campaign); None: unknown
    start: int | None = None


class ClusterBackend(Protocol):
    """What every cluster backend offers to adapters, the nemesis and the campaign."""

    name: str  # "netns", "docker"
    nodes: Sequence[str]  # node names, "n1".."nN"

    def node_address(self, node: str) -> str:
        """The IP address a node's SUT binds to and its peers use."""
        ...

    def client_address(self, node: str) -> str:
        """An IP address the controller (harness clients) uses to reach the node's client port.

        Traffic to it crosses the gateway, never bypasses it.
        """
        ...

    def data_dir(self, node: str) -> Path:
        """A per-node directory the SUT may write to; removed when the cluster goes down."""
        ...

    def log_dir(self, node: str) -> Path:
        """Where the node's process logs go; kept after the cluster goes down."""
        ...

    def spawn(
        self,
        node: str,
        argv: Sequence[str],
        *,
        name: str = "sut",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> NodeProcess:
        """Start argv inside the node. The environment gets MALLORY_NODE, MALLORY_SHM and
        MALLORY_DATA_DIR on top of `env`; output is appended to log_dir(node)/<name>.log.
        Returns once the process exists, not once argv's program runs: its pid may still be
        a launcher (`ip netns exec`, docker's `sh -c exec`) or in its execve, where
        /proc/PID/environ and cmdline read empty for a moment. Whoever needs the program up
        waits for a sign of it (a ready file, a first batch)."""
        ...

    def signal(self, proc: NodeProcess, signum: int) -> None:
        """Send a signal to the process (and its process group)."""
        ...

    def is_running(self, proc: NodeProcess) -> bool:
        """True while the process exists and is not a zombie (a stopped process is running)."""
        ...

    def wait(self, proc: NodeProcess, timeout: float) -> int | None:
        """Wait for the process to exit; its exit status, or None on timeout."""
        ...


def describe_exit(status: int | None) -> str:
    """How a process ended, from its exit status as the backends report it (negative: the
    signal that killed it; None or -1: not ours to reap, or still a zombie)."""
    if status is None or status == -1:
        return "died"
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"
