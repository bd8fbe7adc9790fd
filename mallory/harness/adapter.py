"""The contract a system under test implements, after Jepsen's DB protocol and its small
optional protocols (jepsen.db: Kill, Pause, Primary, LogFiles).

`SutAdapter` is what every adapter does: own one SUT on one cluster, set a node up and tear
it down, start it, say whether it runs and is ready, name its logs, and make clients. It
touches nodes only through the cluster backend (`mallory.cluster.backend.ClusterBackend`),
so one adapter runs on every backend.

What only some SUTs can do is a small protocol of its own, each with its contract below:
`Killable`, `Stoppable`, `Pausable`, `HasProcess`, `LogWatching`, `FramesMessages`, `TakesEnvOverlay`,
`HasPrimaries`, `Promotable`, `Membership`, `ReportsApplied`, `DeclaresLogBugs`. An adapter that can do it defines the methods;
one that cannot does not define them at all (no stub that raises). Whoever needs an ability
asks `isinstance(adapter, Ability)` first, so the nemesis refuses a fault up front instead
of failing mid-schedule.

`ProcessAdapter` implements the process control every SUT with one main process per node
shares; a declarative TOML spec (`SpecAdapter`) or a Python class (e.g.
`RedisReplicationAdapter`) fills in the rest.
"""

from __future__ import annotations

import shutil
import signal as signals
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable

from mallory.cluster.backend import ClusterBackend, NodeProcess
from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.client import Client
from mallory.harness.workload import Workload
from mallory.log_lines import LogPattern
from mallory.observer.log_events import WatchedPattern, expand_template, resolve
from mallory.observer.messages import PeerMessages

#: the round length of an SUT that names none (seconds): between Raft's usual election
#: timeouts (150-300 ms in its paper, 1 s in etcd's defaults)
DEFAULT_ROUND_S = 0.5


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
    """The SUT has no client for this workload (`SutAdapter.client`)."""


@runtime_checkable
class SutAdapter(Protocol):
    """One SUT on one cluster. `node` is always one of `backend.nodes`."""

    name: str
    backend: ClusterBackend

    def setup(self, node: str) -> None:
        """Prepare the node for its SUT (its data directory); `start` calls it."""
        ...

    def teardown(self, node: str) -> None:
        """Stop the node's SUT (no grace needed) and remove its state, so the next start
        begins afresh."""
        ...

    def start(self, node: str) -> NodeProcess:
        """Start the node's SUT without waiting for it to be ready; a node already running
        is left alone (as in Jepsen). Its main process."""
        ...

    def is_running(self, node: str) -> bool:
        """Whether the node's SUT process exists (a paused one runs)."""
        ...

    def is_ready(self, node: str) -> bool:
        """Whether the node runs and serves clients now."""
        ...

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        """Block until the node is ready; MalloryError if it exits first or `timeout`
        (None: the adapter's own) passes."""
        ...

    def log_paths(self, node: str) -> list[Path]:
        """The node's log files, its main process's output first (the checks scan them)."""
        ...

    def client(self, node: str, workload: Workload) -> Client:
        """A client of `workload` that talks to `node` (unopened); UnsupportedOperation when
        the SUT has none for that workload."""
        ...


@runtime_checkable
class Killable(Protocol):
    """The SUT can crash a node (Jepsen's kill); `start` brings it back."""

    def kill(self, node: str) -> None:
        """SIGKILL the node's SUT and return once it is gone; nothing if it is not running."""
        ...


@dataclass(frozen=True)
class StopOutcome:
    """How a graceful stop ended: `exited_by_itself` within the stop timeout after the stop
    signal, or SIGKILLed once the timeout passed; `seconds` from the stop signal until the
    process was gone; its exit `status` as the backend reports it (negative: the signal
    that ended it; -1 where the backend cannot know)."""

    exited_by_itself: bool
    seconds: float
    status: int | None


@runtime_checkable
class Stoppable(Protocol):
    """The SUT can shut a node down the way an operator would (Jepsen's stop, beside kill)."""

    def stop(self, node: str) -> StopOutcome | None:
        """Stop the node's SUT gracefully (its stop signal; killed if it outlasts the
        adapter's stop timeout) and return once it is gone, saying which of the two ended
        it; None, doing nothing, when it is not running."""
        ...


@runtime_checkable
class Pausable(Protocol):
    """The SUT can freeze a node and let it go on (Jepsen's pause)."""

    def pause(self, node: str) -> None:
        """SIGSTOP the node's SUT; returns once the kernel shows it stopped. MalloryError
        if it is not running."""
        ...

    def resume(self, node: str) -> None:
        """SIGCONT a paused node's SUT; returns once it is no longer stopped. MalloryError
        if it is not running."""
        ...


@runtime_checkable
class HasProcess(Protocol):
    """The SUT shows its main process, so faults and checks can read /proc (state, mapped
    libraries, exit status) instead of taking the adapter's word."""

    def process(self, node: str) -> NodeProcess | None:
        """The node's main process as last started (it may have exited since); None before
        the first start."""
        ...


@runtime_checkable
class LogWatching(Protocol):
    """The SUT names log lines that become LOG events (mallory/observer/log_events.py)."""

    def log_watch(self, node: str) -> list[WatchedPattern]:
        """What the node's observer tails, file by file (empty: nothing)."""
        ...


@runtime_checkable
class FramesMessages(Protocol):
    """The SUT says how its peer streams split into messages and how each message's type is
    called (mallory/observer/messages.py), so packets there are named by message type."""

    def peer_messages(self) -> PeerMessages | None:
        """The message format and the port numbers of the flows it applies to (None: the
        SUT declares none)."""
        ...


class EnvOverlay(Protocol):
    """Environment a node's SUT must start with on top of its own, such as the fault shim's
    preload (nemesis/faults/controls.py `NodeControls`)."""

    def merged_env(self, node: str, env: Mapping[str, str]) -> dict[str, str]:
        """`env` (the SUT's environment for `node`) with the overlay on top; a variable both
        set is combined where it is a list (LD_PRELOAD), not lost."""
        ...


@runtime_checkable
class TakesEnvOverlay(Protocol):
    """The SUT's main process can be started with an environment overlay."""

    def add_env_overlay(self, overlay: EnvOverlay) -> None:
        """From the next start on, the node's SUT gets `overlay` on its environment, after
        the overlays added before (adding one again changes nothing). Helper processes the
        adapter keeps outside the in-process faults (redis-sentinel's sentinels) do not."""
        ...


@runtime_checkable
class HasPrimaries(Protocol):
    """The SUT can say which nodes lead (Jepsen's Primary)."""

    def primaries(self) -> list[str]:
        """The running nodes that say they are primary or leader now, in cluster order:
        none during an election, two or more in a split brain. A node that does not answer
        is not named; nothing is raised for it."""
        ...


@runtime_checkable
class Promotable(Protocol):
    """The SUT can make a chosen node the primary (failover, leadership transfer)."""

    def promote(self, node: str) -> None:
        """Make `node` the primary. MalloryError when the change cannot even be asked for;
        one asked for that did not take shows in `primaries()`, which callers check."""
        ...


@runtime_checkable
class Membership(Protocol):
    """The SUT can take a node out of its membership and bring it back."""

    def remove_member(self, node: str) -> None:
        """Take `node` out of the cluster: it stops serving, and comes back only through
        `add_member` (or its next start, where the adapter says so). MalloryError when the
        cluster cannot take the change."""
        ...

    def add_member(self, node: str) -> None:
        """Bring a removed `node` back as a member, started afresh. When the cluster cannot
        take the change now, the adapter either raises MalloryError or finishes it in the
        node's next `start` / `wait_ready` (both of which a nemesis reset calls)."""
        ...


@runtime_checkable
class ReportsApplied(Protocol):
    """The SUT can say what each replica applied, as digests of its applied commands per
    log index (a hash chain), so replicas can be compared (the replica divergence oracle,
    mallory/oracles/replicas.py)."""

    def applied_digests(self) -> dict[str, dict[int, str]]:
        """node -> {log index: digest of every command it applied up to that index}, for the
        running nodes that answer and applied something. The indexes are chosen so that the
        nodes can be compared: one every node that kept it gives, where their records
        overlap. Replicas that applied the same commands give the same digest at an index."""
        ...


@runtime_checkable
class DeclaresLogBugs(Protocol):
    """The SUT names the lines it logs only when a safety invariant of its own broke (a
    spec's `[[log_bugs]]`, `mallory.oracles.logs.parse_log_bugs`): the log oracle looks for
    them in every node's logs, first, then for the built-in patterns. Empty: it names none."""

    log_bugs: tuple[LogPattern, ...]


class ProcessAdapter(SutAdapter, Killable, Stoppable, Pausable, HasProcess, LogWatching, TakesEnvOverlay,
                     DeclaresLogBugs):
    """Process control shared by SUTs that run one main process ("sut") per node: a
    `SutAdapter` that is `Killable`, `Stoppable`, `Pausable`, `HasProcess`, `LogWatching`,
    `TakesEnvOverlay` and `DeclaresLogBugs` (none, unless a subclass names some).

    Subclasses provide `command(node)` and `probe(node)`, and may override `env(node)`,
    `extra_log_paths(node)`, `client`, and add the abilities their SUT has (`HasPrimaries`,
    `Promotable`, `Membership`).
    """

    name = "sut"
    process_name = "sut"
    stop_signal: int = int(signals.SIGTERM)
    stop_timeout: float = 10.0
    ready_timeout: float = 30.0
    ready_interval: float = 0.1
    #: log lines that become LOG events (mallory/observer/log_events.py); `file` templates
    #: take {node} {index} {address} {data_dir} {log_dir}, no `file` = the process's output
    log_events: tuple[LogPattern, ...] = ()
    #: a regex matching the line the process logs when its node becomes leader, its group
    #: `term` the term ("" = it logs none): the two-leaders oracle reads the logs with it
    leader_line: str = ""
    #: the lines the process logs only when a safety invariant of the SUT broke (named
    #: `LogPattern`s: each match is a log-oracle finding of that name); `DeclaresLogBugs`
    log_bugs: tuple[LogPattern, ...] = ()
    #: how long one communication round of the protocol lasts, in seconds: the period at
    #: which the round faults (nemesis/faults/rounds.py) change the links; for a Raft-like
    #: SUT its election timeout
    round_s: float = DEFAULT_ROUND_S

    def __init__(self, backend: ClusterBackend) -> None:
        self.backend = backend
        self._procs: dict[str, NodeProcess] = {}
        self._env_overlays: list[EnvOverlay] = []

    # -- what a subclass says ------------------------------------------------------------

    def command(self, node: str) -> Sequence[str]:
        raise NotImplementedError

    def env(self, node: str) -> dict[str, str]:
        """The SUT's own environment for `node` (the overlays go on top at start)."""
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
        proc = self.backend.spawn(node, list(self.command(node)), name=self.process_name, env=self.start_env(node))
        self._procs[node] = proc
        return proc

    def add_env_overlay(self, overlay: EnvOverlay) -> None:
        if not any(added is overlay for added in self._env_overlays):
            self._env_overlays.append(overlay)

    def start_env(self, node: str) -> dict[str, str]:
        """The environment the node's SUT starts with: `env(node)`, then every overlay on
        top in the order they were added."""
        env = dict(self.env(node))
        for overlay in self._env_overlays:
            env = overlay.merged_env(node, env)
        return env

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

    def stop(self, node: str) -> StopOutcome | None:
        """Graceful stop: the stop signal, then SIGKILL if it is still up after stop_timeout."""
        proc = self._procs.get(node)
        if proc is None or not self.backend.is_running(proc):
            return None
        started = time.monotonic()
        self.backend.signal(proc, self.stop_signal)
        self.backend.signal(proc, signals.SIGCONT)  # a paused process could not act on it
        status = self.backend.wait(proc, self.stop_timeout)
        exited = status is not None
        if not exited:
            self.kill(node)
            status = self.backend.wait(proc, 0)
        return StopOutcome(exited, round(time.monotonic() - started, 3), status)

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

    # -- logs ----------------------------------------------------------------------------

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
