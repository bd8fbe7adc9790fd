"""An observed cluster on docker: the mediator process in the mediator container, an
observer in every node container, over a running compose project (nemesis/docker_backend.py).

The same order and the same interface as the netns stack (mallory/mediator/stack.py:
`cluster`, `client`, `close()`), so `mallory fuzz --backend docker` runs the same campaign
loop. The loop itself runs in the mediator container (`mallory campaign run`, the
container's main process): it is next to the firewall it drives, its campaign directory is
on the project's volume, and a restart policy brings it back after a crash.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path
from typing import Any, Callable

from mallory.errors import MalloryError
from mallory.mediator.client import MediatorClient
from mallory.observer.log_events import write_watch_file
from mallory.polling import wait_until
from nemesis.backend import NodeProcess
from nemesis.docker_backend import GATEWAY, DockerCluster
from nemesis.runstate import cleanup_run, list_runs

API_PORT = 7100
BATCH_PORT = 7101
PROJECT_ENV = "MALLORY_COMPOSE_PROJECT"
PYTHON = "python3"  # the images' interpreter (not the controller's sys.executable)


class ObservedDockerCluster:
    def __init__(
        self,
        run: str,
        project: str,
        *,
        nodes: int | None = None,
        record_dir: Path | None = None,
        skew_ms: float = 100.0,
        docker_url: str | None = None,
        state_root: Path | None = None,
        data_root: Path | None = None,
        adapter_factory: Callable[[DockerCluster], Any] | None = None,
    ) -> None:
        self.token = os.environ.get("MALLORY_TOKEN") or secrets.token_hex(16)
        # A controller killed before its cleanup (the mediator container restarted) left
        # processes in containers that outlive it: its journal names them.
        cleanup_project_runs(project, state_root)
        self.cluster = DockerCluster.up(run, project, docker_url=docker_url, state_root=state_root, data_root=data_root)
        self.mediator_proc: NodeProcess | None = None
        self.observers: list[NodeProcess] = []
        self.adapter: Any = None
        try:
            if nodes is not None and nodes != len(self.cluster.nodes):
                raise MalloryError(f"the campaign wants {nodes} nodes; compose project {project!r} runs "
                                   f"{len(self.cluster.nodes)} ({', '.join(self.cluster.nodes)})")
            self.client = MediatorClient(self.cluster.layout.control_address, API_PORT, self.token)
            self._start_mediator(record_dir, skew_ms)
            if adapter_factory is not None:
                self.adapter = adapter_factory(self.cluster)
            self._start_observers()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_env(
        cls, run: str, nodes: int, record_dir: Path | None = None,
        adapter_factory: Callable[[DockerCluster], Any] | None = None,
    ) -> "ObservedDockerCluster":
        """Inside the compose project: its name is in $MALLORY_COMPOSE_PROJECT."""
        project = os.environ.get(PROJECT_ENV)
        if not project:
            raise MalloryError(f"--backend docker runs inside a compose project: ${PROJECT_ENV} is not set "
                               "(use `mallory compose` and `mallory campaign up`)")
        return cls(run, project, nodes=nodes, record_dir=record_dir, adapter_factory=adapter_factory)

    def _start_mediator(self, record_dir: Path | None, skew_ms: float) -> None:
        lay = self.cluster.layout
        ready = self.cluster.data_dir(GATEWAY) / "mediator.ready"
        ready.unlink(missing_ok=True)
        argv = [PYTHON, "-m", "mallory.cli", "mediator", "--token", self.token, "--ready-file", str(ready),
                "--skew-ms", str(skew_ms), "--api", f"{lay.control_address}:{API_PORT}",
                "--batch", f"0.0.0.0:{BATCH_PORT}"]
        argv += [arg for n in lay.nodes for arg in ("--node", f"{n.name}={n.address}")]
        if record_dir is not None:
            argv += ["--record", str(record_dir)]
        self.mediator_proc = self.cluster.spawn(GATEWAY, argv, name="mediator")
        wait_until(lambda: ready.exists() or not self.cluster.is_running(self.mediator_proc), 60, "the mediator")
        if not ready.exists():
            raise MalloryError(f"the mediator did not start; see {self.mediator_proc.log_path}")

    def _start_observers(self) -> None:
        lay = self.cluster.layout
        for node in lay.nodes:
            peers = [arg for n in lay.nodes if n.name != node.name for arg in ("--peer", n.address)]
            argv = [PYTHON, "-m", "mallory.cli", "observe", "--node", node.name,
                    "--mediator", f"{node.gateway_address}:{BATCH_PORT}", *peers]
            watched = self.adapter.log_watch(node.name) if hasattr(self.adapter, "log_watch") else []
            if watched:  # the adapter's log lines become LOG events (as in the netns stack)
                path = self.cluster.data_dir(GATEWAY) / f"log-events-{node.name}.json"
                write_watch_file(str(path), watched)
                argv += ["--log-events", str(path)]
            self.observers.append(self.cluster.spawn(node.name, argv, name="observer"))

        def all_reporting() -> bool:
            reported = self.client.metrics()["ingest"]["nodes"]
            return all(reported.get(n, {}).get("batches", 0) > 0 for n in self.cluster.nodes)

        wait_until(all_reporting, 60, "batches from every observer")

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

    def __enter__(self) -> "ObservedDockerCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cleanup_project_runs(project: str, state_root: Path | None = None) -> list[str]:
    """Clean up the registered runs over `project` (and only those: a state root may hold
    netns runs too)."""
    removed: list[str] = []
    for record in list_runs(state_root):
        try:
            owner = json.loads(record.layout_path.read_text()).get("project")
        except (OSError, ValueError):
            continue
        if owner == project:
            removed += cleanup_run(record)
    return removed
