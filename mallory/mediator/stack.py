"""An observed cluster: a netns run with the mediator in its gateway and an observer per node.

The order matters and is the paper's: the mediator first (observers dial it), then the
observers (they must see the SUT's first packet and create its shm ring), then the SUT,
which the caller starts through its adapter. An adapter made by `adapter_factory` (once the
cluster is up, before the observers) lends its `log_watch` patterns to the observers, so
its log lines become LOG events (mallory/observer/log_events.py). `close()` undoes it all in reverse; the run
registry (nemesis/runstate.py) covers a kill -9 of the controller, through `mallory cleanup`.
"""

from __future__ import annotations

import secrets
import signal
import sys
from pathlib import Path
from typing import Any, Callable

from mallory.commands.mediator import DEFAULT_API_PORT
from mallory.errors import MalloryError
from mallory.mediator.client import MediatorClient
from mallory.observer.log_events import write_watch_file
from mallory.polling import wait_until
from nemesis.backend import NodeProcess
from nemesis.netns import NetnsCluster


class ObservedCluster:
    def __init__(
        self,
        run: str,
        nodes: int,
        record_dir: Path | None = None,
        skew_ms: float = 100.0,
        adapter_factory: Callable[[NetnsCluster], Any] | None = None,
    ) -> None:
        self.token = secrets.token_hex(16)
        self.cluster = NetnsCluster.up(run, nodes)
        self.client = MediatorClient(self.cluster.layout.gateway_control_address, DEFAULT_API_PORT, self.token)
        self.mediator_proc: NodeProcess | None = None
        self.observers: list[NodeProcess] = []
        self.adapter: Any = None
        try:
            self._start_mediator(record_dir, skew_ms)
            if adapter_factory is not None:
                self.adapter = adapter_factory(self.cluster)
            self._start_observers()
        except BaseException:
            self.close()
            raise

    def _start_mediator(self, record_dir: Path | None, skew_ms: float) -> None:
        ready = self.cluster.data_dir("gw") / "mediator.ready"
        ready.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "mallory.cli", "mediator", "--run", self.cluster.run,
                "--token", self.token, "--ready-file", str(ready), "--skew-ms", str(skew_ms)]
        if record_dir is not None:
            argv += ["--record", str(record_dir)]
        self.mediator_proc = self.cluster.spawn("gw", argv, name="mediator")
        wait_until(lambda: ready.exists() or not self.cluster.is_running(self.mediator_proc), 30, "the mediator")
        if not ready.exists():
            raise MalloryError(f"the mediator did not start; see {self.mediator_proc.log_path}")

    def _start_observers(self) -> None:
        for node in self.cluster.nodes:
            argv = [sys.executable, "-m", "mallory.cli", "observe", "--run", self.cluster.run]
            watched = self.adapter.log_watch(node) if hasattr(self.adapter, "log_watch") else []
            if watched:
                path = self.cluster.data_dir("gw") / f"log-events-{node}.json"
                write_watch_file(str(path), watched)
                argv += ["--log-events", str(path)]
            self.observers.append(self.cluster.spawn(node, argv, name="observer"))

        def all_reporting() -> bool:
            nodes = self.client.metrics()["ingest"]["nodes"]
            return all(nodes.get(n, {}).get("batches", 0) > 0 for n in self.cluster.nodes)

        wait_until(all_reporting, 30, "batches from every observer")

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

    def __enter__(self) -> ObservedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
