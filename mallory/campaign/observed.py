"""What every observed cluster shares, whatever its backend (netns: mallory/campaign/netns_stack.py,
docker: mallory/campaign/docker_stack.py): the mediator started in the gateway and waited for, an
observer per node (with the adapter's log patterns), every observer's first batch waited
for, and `close()` stopping them all before the cluster goes down. Each backend says only
how its mediator and observers are invoked.

The mediator's API token reaches it in a file of the run's state directory (mode 0600,
removed with the run), never on its command line, where any local user could read it.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable, Self

from mallory.cluster.backend import NodeProcess
from mallory.cluster.journaled import GATEWAY
from mallory.errors import MalloryError
from mallory.harness.adapter import LogWatching
from mallory.mediator.client import MediatorClient
from mallory.observer.log_events import write_watch_file
from mallory.polling import wait_until

TOKEN_FILE = "mediator.token"  # in the run's state directory (mallory/cluster/registry.py)


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
        """`mallory observe` for `node` (log patterns are added here)."""
        raise NotImplementedError

    def _start(self, record_dir: Path | None, skew_ms: float, adapter_factory: Callable[[Any], Any] | None) -> None:
        """The mediator, then the adapter (its log patterns go to the observers), then the
        observers; on any failure everything started so far is taken down."""
        try:
            self._start_mediator(record_dir, skew_ms)
            if adapter_factory is not None:
                self.adapter = adapter_factory(self.cluster)
            self._start_observers()
        except BaseException:
            self.close()
            raise

    def _start_mediator(self, record_dir: Path | None, skew_ms: float) -> None:
        ready = self.cluster.data_dir(GATEWAY) / "mediator.ready"
        ready.unlink(missing_ok=True)
        # The token travels in a file only we can read, never in argv (any local user reads
        # /proc/<pid>/cmdline); it goes with the run's state directory.
        token_file = self.cluster.record.write_secret(TOKEN_FILE, self.token)
        argv = [*self._mediator_command(), "--token-file", str(token_file), "--ready-file", str(ready),
                "--skew-ms", str(skew_ms)]
        if record_dir is not None:
            argv += ["--record", str(record_dir)]
        self.mediator_proc = self.cluster.spawn(GATEWAY, argv, name="mediator")
        wait_until(lambda: ready.exists() or not self.cluster.is_running(self.mediator_proc), self.start_timeout, "the mediator")
        if not ready.exists():
            raise MalloryError(f"the mediator did not start; see {self.mediator_proc.log_path}")

    def _start_observers(self) -> None:
        for node in self.cluster.nodes:
            argv = self._observer_command(node)
            watched = self.adapter.log_watch(node) if isinstance(self.adapter, LogWatching) else []
            if watched:  # the adapter's log lines become LOG events
                path = self.cluster.data_dir(GATEWAY) / f"log-events-{node}.json"
                write_watch_file(str(path), watched)
                argv += ["--log-events", str(path)]
            self.observers.append(self.cluster.spawn(node, argv, name="observer"))

        def all_reporting() -> bool:
            reported = self.client.metrics()["ingest"]["nodes"]
            return all(reported.get(n, {}).get("batches", 0) > 0 for n in self.cluster.nodes)

        wait_until(all_reporting, self.start_timeout, "batches from every observer")

    def close(self) -> None:
        procs = [*self.observers, *([self.mediator_proc] if self.mediator_proc else [])]
        for proc in procs:
            if self.cluster.is_running(proc):
                self.cluster.signal(proc, signal.SIGTERM)
        for proc in procs:
            if self.cluster.wait(proc, 10) is None:
                self.cluster.signal(proc, signal.SIGKILL)
                self.cluster.wait(proc, 5)
        self.cluster.down()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
