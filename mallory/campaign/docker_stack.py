"""An observed cluster on docker: the mediator process in the mediator container, an
observer in every node container, over a running compose project (mallory/cluster/docker.py).

The same order and the same interface as the netns stack (mallory/campaign/netns_stack.py; both are
mallory/campaign/observed.py with their own invocations:
`cluster`, `client`, `close()`), so `mallory fuzz --backend docker` runs the same campaign
loop. The loop itself runs in the mediator container (`mallory campaign run`, the
container's main process): it is next to the firewall it drives, its campaign directory is
on the project's volume, and a restart policy brings it back after a crash.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from mallory.campaign.observed import ObservedStack
from mallory.cluster.docker import DockerCluster
from mallory.cluster.registry import cleanup_run, list_runs, run_status
from mallory.errors import MalloryError
from mallory.mediator import API_PORT, BATCH_PORT
from mallory.mediator.client import MediatorClient

PROJECT_ENV = "MALLORY_COMPOSE_PROJECT"
PYTHON = "python3"  # the images' interpreter (not the controller's sys.executable)


class ObservedDockerCluster(ObservedStack):
    start_timeout = 60.0  # containers on a loaded docker host start slower than namespaces

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
        super().__init__()
        self.token = os.environ.get("MALLORY_TOKEN") or secrets.token_hex(16)
        # A controller killed before its cleanup (the mediator container restarted) left
        # processes in containers that outlive it: its journal names them.
        cleanup_project_runs(project, state_root)
        self.cluster = DockerCluster.up(run, project, docker_url=docker_url, state_root=state_root, data_root=data_root)
        if nodes is not None and nodes != len(self.cluster.nodes):
            self.close()
            raise MalloryError(f"the campaign wants {nodes} nodes; compose project {project!r} runs "
                               f"{len(self.cluster.nodes)} ({', '.join(self.cluster.nodes)})")
        self.client = MediatorClient(self.cluster.layout.control_address, API_PORT, self.token)
        self._start(record_dir, skew_ms, adapter_factory)

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

    def _mediator_command(self) -> list[str]:
        lay = self.cluster.layout
        argv = [PYTHON, "-m", "mallory.cli", "mediator", "--api", f"{lay.control_address}:{API_PORT}",
                "--batch", f"0.0.0.0:{BATCH_PORT}"]
        return argv + [arg for n in lay.nodes for arg in ("--node", f"{n.name}={n.address}")]

    def _observer_command(self, node: str) -> list[str]:
        lay = self.cluster.layout
        peers = [arg for n in lay.nodes if n.name != node for arg in ("--peer", n.address)]
        return [PYTHON, "-m", "mallory.cli", "observe", "--node", node,
                "--mediator", f"{lay.node(node).gateway_address}:{BATCH_PORT}", *peers]


def cleanup_project_runs(project: str, state_root: Path | None = None) -> list[str]:
    """Clean up the registered runs over `project` (and only those: a state root may hold
    netns runs too). A live one (its controller still runs) is never touched: MalloryError,
    as two controllers cannot drive one project."""
    removed: list[str] = []
    for record in list_runs(state_root):
        try:
            over = json.loads(record.layout_path.read_text()).get("project")
        except (OSError, ValueError):
            continue
        if over != project:
            continue
        if run_status(record) == "live":
            raise MalloryError(f"compose project {project!r} is driven by run {record.name!r} "
                               f"(pid {record.owner.pid}), which still runs")
        removed += cleanup_run(record)
    return removed
