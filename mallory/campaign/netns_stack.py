"""An observed cluster: a netns run with the mediator in its gateway and an observer per node.

The order matters and is the paper's: the mediator first (observers dial it), then the
observers (they must see the SUT's first packet and create its shm ring), then the SUT,
which the caller starts through its adapter. An adapter made by `adapter_factory` (once the
cluster is up, before the mediator) lends its `log_watch` patterns to the observers, so
its log lines become LOG events (mallory/observer/log_events.py), and `mediator_args` of it
gives the mediator more arguments (`mallory scenario run`: the message layer's). `close()` undoes it all in reverse; the run
registry (mallory/cluster/registry.py) covers a kill -9 of the controller, through `mallory cleanup`.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any, Callable

from mallory.campaign.observed import ObservedStack
from mallory.cluster.netns import NetnsCluster
from mallory.mediator import API_PORT
from mallory.mediator.client import MediatorClient


class ObservedCluster(ObservedStack):
    def __init__(
        self,
        run: str,
        nodes: int,
        record_dir: Path | None = None,
        skew_ms: float = 100.0,
        adapter_factory: Callable[[NetnsCluster], Any] | None = None,
        mediator_args: Callable[[Any], list[str]] | None = None,
    ) -> None:
        super().__init__()
        self.token = secrets.token_hex(16)
        self.cluster = NetnsCluster.up(run, nodes)
        self.client = MediatorClient(self.cluster.layout.gateway_control_address, API_PORT, self.token)
        self._start(record_dir, skew_ms, adapter_factory, mediator_args)

    def _mediator_command(self) -> list[str]:
        return [sys.executable, "-m", "mallory.cli", "mediator", "--run", self.cluster.run]

    def _observer_command(self, node: str) -> list[str]:
        return [sys.executable, "-m", "mallory.cli", "observe", "--run", self.cluster.run]
