"""What every observed cluster shares, whatever its backend (netns: mallory/campaign/netns_stack.py,
docker: mallory/campaign/docker_stack.py): the mediator started in the gateway and waited for, an
observer per node (with the adapter's log patterns and message format), every observer's
first batch waited for, and `close()` stopping them all before the cluster goes down. Each
backend says only how its mediator and observers are invoked.

The mediator's API token reaches it in a file of the run's state directory (mode 0600,
removed with the run), never on its command line, where any local user could read it.

The stack is the campaign's watchdog (`revive_dead`, asked once per step; see
mallory/campaign/loop.py). Neither component's death blackholes the SUT: their NFQUEUE rules
carry --queue-bypass, so packets flow unqueued while no reader is bound (only the packets
the dead reader held are lost), and a reader that falls behind fails open. What a death
costs is observation, and each component is treated by what it holds:

    observer   restarted. It holds nothing that a new one cannot pick up: it re-installs
               its rules, resumes the node's ring at the cursor its predecessor published
               and its log tail at the saved cursor, and the mediator takes its batches as a
               new incarnation. The steps until its first batch are unobserved.
    mediator   ends the campaign (ComponentDied). It holds the faults in force (firewall
               rules), the timeline the windows come from and the recording; a new one would
               start with none of them while the nemesis believes its faults still act. The
               schedule in flight is dropped, so `mallory fuzz --resume` continues from the
               last whole schedule.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any, Callable, Self

from mallory.campaign.loop import ComponentDied
from mallory.cluster.backend import NodeProcess, describe_exit
from mallory.cluster.journaled import GATEWAY
from mallory.errors import MalloryError
from mallory.harness.adapter import FramesMessages, LogWatching, ProcessAdapter
from mallory.instrument.catalogue import catalogue_path
from mallory.mediator.client import MediatorClient
from mallory.observer import messages
from mallory.observer.log_events import write_watch_file
from mallory.polling import wait_until

log = logging.getLogger(__name__)
TOKEN_FILE = "mediator.token"  # in the run's state directory (mallory/cluster/registry.py)
LAYER_MESSAGES_FILE = "layer-messages.json"  # in the gateway's data directory


def message_layer_args(adapter: Any, sut: str, decider: list[str]) -> list[str]:
    """The mediator's arguments for a message layer (mallory/mediator/message_layer.py):
    `decider` (`--scenario FILE` or `--filter-sets FILE`), the SUT's peer messages, written
    to the gateway's data directory, and, when the build wrote one, its annotation
    catalogue (code events' names). MalloryError for an SUT that declares no messages: a
    message layer decides messages, so it needs them."""
    declared = adapter.peer_messages() if isinstance(adapter, FramesMessages) else None
    if declared is None:
        raise MalloryError(f"SUT {sut} declares no peer messages ([messages] in its spec): {decider[0]} decides "
                           "messages, so it needs them")
    messages_file = adapter.backend.data_dir(GATEWAY) / LAYER_MESSAGES_FILE
    messages.write_watch_file(str(messages_file), declared)
    argv = [*decider, "--messages", str(messages_file)]
    if isinstance(adapter, ProcessAdapter):
        catalogue = Path(catalogue_path(adapter.command(adapter.backend.nodes[0])[0]))
        if catalogue.exists():
            argv += ["--catalogue", str(catalogue.resolve())]
    return argv


def component_env() -> dict[str, str]:
    """The environment the mediator and the observers get on top of the node's: at most two
    glibc malloc arenas (MALLOC_ARENA_MAX), unless the user's environment names a number.

    glibc gives a thread that finds the main arena busy an arena of its own (up to 8 per
    core), and an arena keeps the pages of the largest burst its thread ever handled. What
    Python allocates beyond 512 bytes (the lines read, a batch's lists) comes from these
    arenas. The soak saw the mediator grow 3-4 MB a minute in 16-23 MB arenas, one per
    batch-receiver thread, each following its own bursts: fragmentation spread over as many
    arenas as there are observers. Python code allocates under the GIL, so more arenas buy
    no parallelism; two rather than one give native code that allocates without the GIL
    (called through ctypes) a second arena before it waits."""
    return {"MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}


def mediator_env() -> dict[str, str]:
    """The mediator's environment on top of the node's: component_env(), and Python's small
    objects from glibc malloc instead of pymalloc (PYTHONMALLOC=malloc), unless the user's
    environment names an allocator.

    pymalloc gives an arena (1 MiB) back only once every object in it is freed. The mediator
    turns over a burst's worth of events, packets and window rows, and the few objects that
    outlive a burst (a remembered SEND, a window's record) pin the arenas it filled: the
    100-minute soak saw pymalloc's arenas grow 27 -> 49 MB (+9 MB/h) while its live blocks
    grew +0.9 MB/h. glibc's malloc_trim, which the mediator calls each minute
    (mediator/memory.py), gives back every free 4 KiB page instead. In-process, through
    bursts of 6,000 and 30,000 events/s (bench/bench_mediator_allocator.py), the resident
    memory after each burst rose 43 -> 65 MB over 14 bursts with pymalloc and 31 -> 32 MB
    with malloc, for 18% more CPU time on that path and the same peak. The fuzz process and
    the observers keep pymalloc: their memory stays flat."""
    return {**component_env(), "PYTHONMALLOC": os.environ.get("PYTHONMALLOC", "malloc")}


class ObservedStack:
    """Subclasses set `cluster` (a JournaledCluster: its run's state directory holds the
    token file), `client` and `token`, and say how the mediator and an observer are invoked;
    `start_timeout` bounds the wait for each to come up."""

    cluster: Any
    client: MediatorClient
    token: str
    start_timeout: float = 30.0

    def __init__(self) -> None:
        self.mediator_proc: NodeProcess | None = None
        self.observers: list[NodeProcess] = []
        self.adapter: Any = None

    def _mediator_command(self) -> list[str]:
        """`mallory mediator` and the backend's own arguments (token file, ready file, skew
        and recording are added here)."""
        raise NotImplementedError

    def _observer_command(self, node: str) -> list[str]:
        """`mallory observe` for `node` (log patterns and the message format are added here)."""
        raise NotImplementedError

    def _start(self, record_dir: Path | None, skew_ms: float, adapter_factory: Callable[[Any], Any] | None,
               mediator_args: Callable[[Any], list[str]] | None = None) -> None:
        """The adapter (its log patterns and messages go to the observers, and, through
        `mediator_args` of it, anything else the mediator is to be given), the mediator, then
        the observers; on any failure everything started so far is taken down."""
        try:
            if adapter_factory is not None:
                self.adapter = adapter_factory(self.cluster)
            self._start_mediator(record_dir, skew_ms, mediator_args(self.adapter) if mediator_args else [])
            self._start_observers()
        except BaseException:
            self.close()
            raise

    def _start_mediator(self, record_dir: Path | None, skew_ms: float, extra: list[str]) -> None:
        ready = self.cluster.data_dir(GATEWAY) / "mediator.ready"
        ready.unlink(missing_ok=True)
        # The token travels in a file only we can read, never in argv (any local user reads
        # /proc/<pid>/cmdline); it goes with the run's state directory.
        token_file = self.cluster.record.write_secret(TOKEN_FILE, self.token)
        argv = [*self._mediator_command(), "--token-file", str(token_file), "--ready-file", str(ready),
                "--skew-ms", str(skew_ms)]
        if record_dir is not None:
            argv += ["--record", str(record_dir)]
        argv += extra
        log.info("starting the mediator in the gateway")
        self.mediator_proc = self.cluster.spawn(GATEWAY, argv, name="mediator", env=mediator_env())
        wait_until(lambda: ready.exists() or not self.cluster.is_running(self.mediator_proc), self.start_timeout, "the mediator")
        if not ready.exists():
            raise MalloryError(f"the mediator did not start; see {self.mediator_proc.log_path}")

    def _start_observers(self) -> None:
        log.info("starting an observer on each node")
        for node in self.cluster.nodes:
            self.observers.append(self._spawn_observer(node))
        log.info("waiting for every observer's first batch")
        self._wait_for_batches({node: 0 for node in self.cluster.nodes})

    def _spawn_observer(self, node: str) -> NodeProcess:
        argv = self._observer_command(node)
        watched = self.adapter.log_watch(node) if isinstance(self.adapter, LogWatching) else []
        if watched:  # the adapter's log lines become LOG events
            path = self.cluster.data_dir(GATEWAY) / f"log-events-{node}.json"
            write_watch_file(str(path), watched)
            argv += ["--log-events", str(path)]
        declared = self.adapter.peer_messages() if isinstance(self.adapter, FramesMessages) else None
        if declared is not None:  # packets of its peer streams are named by message type
            path = self.cluster.data_dir(GATEWAY) / f"messages-{node}.json"
            messages.write_watch_file(str(path), declared)
            argv += ["--messages", str(path)]
        return self.cluster.spawn(node, argv, name="observer", env=component_env())

    def _batches(self) -> dict[str, int]:
        """Batches the mediator has ingested from each node so far."""
        reported = self.client.metrics()["ingest"]["nodes"]
        return {node: reported.get(node, {}).get("batches", 0) for node in self.cluster.nodes}

    def _wait_for_batches(self, after: dict[str, int]) -> None:
        """Until every node in `after` has delivered a batch beyond its count there."""
        what = f"batches from the observer{'s' if len(after) > 1 else ''} of {', '.join(after)}"
        wait_until(lambda: all(n > after[node] for node, n in self._batches().items() if node in after),
                   self.start_timeout, what)

    def revive_dead(self, grace_s: float = 0.0) -> list[str]:
        """The watchdog: a dead mediator ends the campaign (ComponentDied); each dead observer
        is restarted, and waited for until its first batch arrives. The observers restarted,
        as "observer NODE" (see the module docstring for why each is treated so). With
        `grace_s`, a mediator that exits within it is dead (see Watchdog.revive_dead)."""
        proc = self.mediator_proc
        if proc is not None:
            status = self.cluster.wait(proc, grace_s) if grace_s > 0 else None
            if status is not None or not self.cluster.is_running(proc):
                if status is None:
                    status = self.cluster.wait(proc, 0)
                raise ComponentDied(f"the mediator (pid {proc.pid}) {describe_exit(status)}; its log: {proc.log_path}")
        dead = [i for i, proc in enumerate(self.observers) if not self.cluster.is_running(proc)]
        if not dead:
            return []
        before = self._batches()
        for i in dead:
            old = self.observers[i]
            log.warning("watchdog: the observer of %s (pid %d) %s; restarting it",
                        old.node, old.pid, describe_exit(self.cluster.wait(old, 0)))
            self.observers[i] = self._spawn_observer(old.node)
        nodes = [self.observers[i].node for i in dead]
        try:
            self._wait_for_batches({node: before[node] for node in nodes})
        except MalloryError as exc:
            logs = ", ".join(str(self.observers[i].log_path) for i in dead)
            raise ComponentDied(f"an observer died and did not come back ({exc}); its log: {logs}") from None
        return [f"observer {node}" for node in nodes]

    def close(self) -> None:
        log.info("stopping the observers and the mediator, removing the cluster")
        # The observers first: each sends its last batches as it stops, which a mediator
        # stopping at the same time would not take in (the recording would lose its tail).
        for group in (self.observers, [self.mediator_proc] if self.mediator_proc else []):
            for proc in group:
                if self.cluster.is_running(proc):
                    self.cluster.signal(proc, signal.SIGTERM)
            for proc in group:
                if self.cluster.wait(proc, 10) is None:
                    self.cluster.signal(proc, signal.SIGKILL)
                    self.cluster.wait(proc, 5)
        self.cluster.down()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


