"""The contract a system under test implements, after Jepsen's DB protocol.

An adapter owns one SUT on one cluster: how to set a node up and tear it down, start it,
kill it (SIGKILL), stop it gracefully (its stop signal, SIGKILL after a timeout), pause and
resume it (SIGSTOP / SIGCONT), where its logs are, which nodes lead (if it can tell), the
optional membership changes, when a node is ready, and a client factory. It touches nodes
only through the cluster backend (`mallory.cluster.backend.ClusterBackend`), so one adapter runs on
every backend.

`Capabilities` says which optional operations an SUT supports, so the nemesis can refuse a
fault (say, a membership change) up front instead of failing mid-schedule.
`ProcessAdapter` implements the process control every SUT shares; a declarative TOML spec
(`SpecAdapter`) or a Python class (e.g. `RedisReplicationAdapter`) fills in the rest.
"""

from __future__ import annotations

import shutil
import signal as signals
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from mallory.cluster.backend import ClusterBackend, NodeProcess
from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.client import Client
from mallory.harness.workload import Workload
from mallory.log_lines import LogPattern
from mallory.observer.log_events import WatchedPattern, expand_template, resolve


def _await_state(pid: int, stopped: bool, timeout: float = 2.0) -> None:
    """Signals are delivered asynchronously: wait (briefly) until /proc/<pid>/stat agrees,
    so a pause is in force when pause() returns. Best effort where /proc cannot see the pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = proc_state(pid)
        if state is None or (state in ("T", "t")) == stopped:
            return
        time.sleep(0.002)


class UnsupportedOperation(MalloryError):
    """The SUT cannot do this (check `capabilities` first)."""


@dataclass(frozen=True)
class Capabilities:
    primaries: bool = False  # can say which nodes are primaries/leaders
    add_member: bool = False
    remove_member: bool = False
    promote: bool = False


class SutAdapter(Protocol):
    name: str
    capabilities: Capabilities
    backend: ClusterBackend

    def setup(self, node: str) -> None: ...
    def teardown(self, node: str) -> None: ...
    def start(self, node: str) -> NodeProcess: ...
    def kill(self, node: str) -> None: ...
    def stop(self, node: str) -> None: ...
    def pause(self, node: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def is_running(self, node: str) -> bool: ...
    def is_ready(self, node: str) -> bool: ...
    def wait_ready(self, node: str, timeout: float | None = None) -> None: ...
    def log_paths(self, node: str) -> list[Path]: ...
    def primaries(self) -> list[str]: ...
    def add_member(self, node: str) -> None: ...
    def remove_member(self, node: str) -> None: ...
    def promote(self, node: str) -> None: ...
    def client(self, node: str, workload: Workload) -> Client: ...


class ProcessAdapter:
    """Process control shared by SUTs that run one main process ("sut") per node.

    Subclasses provide `command(node)` and `probe(node)`, and may override `env(node)`,
    `extra_log_paths(node)`, `client` and the optional operations.
    """

    name = "sut"
    capabilities = Capabilities()
    process_name = "sut"
    stop_signal: int = int(signals.SIGTERM)
    stop_timeout: float = 10.0
    ready_timeout: float = 30.0
    ready_interval: float = 0.1
    #: log lines that become LOG events (mallory/observer/log_events.py); `file` templates
    #: take {node} {index} {address} {data_dir} {log_dir}, no `file` = the process's output
    log_events: tuple[LogPattern, ...] = ()

    def __init__(self, backend: ClusterBackend) -> None:
        self.backend = backend
        self._procs: dict[str, NodeProcess] = {}

    # -- what a subclass says ------------------------------------------------------------

    def command(self, node: str) -> Sequence[str]:
        raise NotImplementedError

    def env(self, node: str) -> dict[str, str]:
        return {}

    def probe(self, node: str) -> bool:
        """True when the (running) node serves clients."""
        raise NotImplementedError

    def extra_log_paths(self, node: str) -> list[Path]:
        return []

    def client(self, node: str, workload: Workload) -> Client:
        raise UnsupportedOperation(f"{self.name}: no client for workload {workload.name}")

    # -- lifecycle -----------------------------------------------------------------------

    def setup(self, node: str) -> None:
        self.backend.data_dir(node).mkdir(parents=True, exist_ok=True)

    def teardown(self, node: str) -> None:
        """Kill the node's SUT and empty its data dir, so the next setup starts afresh."""
        self.kill(node)
        data = self.backend.data_dir(node)
        if data.is_dir():
            for entry in data.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def process(self, node: str) -> NodeProcess | None:
        return self._procs.get(node)

    def is_running(self, node: str) -> bool:
        proc = self._procs.get(node)
        return proc is not None and self.backend.is_running(proc)

    def start(self, node: str) -> NodeProcess:
        """Start the node's SUT; a node already running is left alone (as in Jepsen)."""
        proc = self._procs.get(node)
        if proc is not None and self.backend.is_running(proc):
            return proc
        self.setup(node)
        self._starting(node)
        proc = self.backend.spawn(node, list(self.command(node)), name=self.process_name, env=self.env(node))
        self._procs[node] = proc
        return proc

    def _starting(self, node: str) -> None:
        """Hook run right before a spawn (e.g. to mark where this run's log output begins)."""

    def kill(self, node: str) -> None:
        """SIGKILL, and wait until the process is gone."""
        proc = self._procs.get(node)
        if proc is None or not self.backend.is_running(proc):
            return
        self.backend.signal(proc, signals.SIGKILL)
        if self.backend.wait(proc, 10.0) is None:
            raise MalloryError(f"{self.name}: {node}'s process {proc.pid} survived SIGKILL for 10 s")

    def stop(self, node: str) -> None:
        """Graceful stop: the stop signal, then SIGKILL if it is still up after stop_timeout."""
        proc = self._procs.get(node)
        if proc is None or not self.backend.is_running(proc):
            return
        self.backend.signal(proc, self.stop_signal)
        self.backend.signal(proc, signals.SIGCONT)  # a paused process could not act on it
        if self.backend.wait(proc, self.stop_timeout) is None:
            self.kill(node)

    def pause(self, node: str) -> None:
        """SIGSTOP; returns once the kernel shows the process stopped."""
        proc = self._running(node, "pause")
        self.backend.signal(proc, signals.SIGSTOP)
        _await_state(proc.pid, stopped=True)

    def resume(self, node: str) -> None:
        """SIGCONT; returns once the process is no longer stopped."""
        proc = self._running(node, "resume")
        self.backend.signal(proc, signals.SIGCONT)
        _await_state(proc.pid, stopped=False)

    def _running(self, node: str, what: str) -> NodeProcess:
        proc = self._procs.get(node)
        if proc is None or not self.backend.is_running(proc):
            raise MalloryError(f"{self.name}: cannot {what} {node}: it is not running")
        return proc

    # -- readiness -----------------------------------------------------------------------

    def is_ready(self, node: str) -> bool:
        return self.is_running(node) and self.probe(node)

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        """Block until the node is ready; MalloryError if it dies or the timeout passes."""
        deadline = time.monotonic() + (self.ready_timeout if timeout is None else timeout)
        while True:
            if not self.is_running(node):
                raise MalloryError(f"{self.name}: {node} exited before it was ready; see {self.log_paths(node)[0]}")
            if self.probe(node):
                return
            if time.monotonic() >= deadline:
                raise MalloryError(f"{self.name}: {node} not ready after {timeout or self.ready_timeout} s")
            time.sleep(self.ready_interval)

    # -- logs and roles ------------------------------------------------------------------

    def log_paths(self, node: str) -> list[Path]:
        return [self.backend.log_dir(node) / f"{self.process_name}.log", *self.extra_log_paths(node)]

    def log_template_values(self, node: str) -> dict[str, object]:
        return {
            "node": node,
            "index": list(self.backend.nodes).index(node) + 1,
            "address": self.backend.node_address(node),
            "data_dir": str(self.backend.data_dir(node)),
            "log_dir": str(self.backend.log_dir(node)),
        }

    def log_watch(self, node: str) -> list[WatchedPattern]:
        """`log_events` resolved for `node`: what its observer tails, file by file."""
        if not self.log_events:
            return []
        values = self.log_template_values(node)
        where = f"{self.name}: log_events"
        return resolve(self.log_events, lambda t: expand_template(t, values, where), str(self.log_paths(node)[0]))

    def primaries(self) -> list[str]:
        raise UnsupportedOperation(f"{self.name} cannot tell which nodes are primaries")

    def add_member(self, node: str) -> None:
        raise UnsupportedOperation(f"{self.name} cannot add members")

    def remove_member(self, node: str) -> None:
        raise UnsupportedOperation(f"{self.name} cannot remove members")

    def promote(self, node: str) -> None:
        raise UnsupportedOperation(f"{self.name} cannot promote a node")
