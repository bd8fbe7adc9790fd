"""One recorded run: start the SUT on every node, drive a workload, write the history.

The campaign and `mallory workload` both use this; faults come from outside (the nemesis
records its own ops into the same recorder).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from mallory.harness.adapter import HasPrimaries, SutAdapter
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, RunSummary, WorkloadRunner
from mallory.harness.workload import Workload

log = logging.getLogger(__name__)


def start_all(adapter: SutAdapter, timeout: float | None = None) -> None:
    """Start the SUT on every node, then wait until every node is ready."""
    log.info("starting %s on %s", adapter.name, ", ".join(adapter.backend.nodes))
    for node in adapter.backend.nodes:
        adapter.start(node)
    for node in adapter.backend.nodes:
        log.info("waiting for %s on %s to be ready", adapter.name, node)
        adapter.wait_ready(node, timeout)


def teardown_all(adapter: SutAdapter) -> None:
    log.info("stopping %s and removing its data on every node", adapter.name)
    for node in adapter.backend.nodes:
        adapter.teardown(node)


def client_node_for(adapter: SutAdapter) -> Callable[[int], str]:
    """Which node worker i talks to: the primary when the SUT can say (clients of a
    primary/replica system write there), else nodes in turn, as Jepsen assigns them."""
    nodes = list(adapter.backend.nodes)
    if isinstance(adapter, HasPrimaries):
        primaries = adapter.primaries()
        if primaries:
            return lambda worker: primaries[0]
    return lambda worker: nodes[worker % len(nodes)]


def record_run(
    adapter: SutAdapter,
    workload: Workload,
    config: RunConfig,
    out_dir: Path,
    recorder: HistoryRecorder | None = None,
) -> RunSummary:
    """Run `workload` against a started cluster; history.edn and history.jsonl go to out_dir."""
    recorder = recorder or HistoryRecorder.to_dir(out_dir, keep=False)
    node_for = client_node_for(adapter)
    try:
        return WorkloadRunner(workload, lambda w: adapter.client(node_for(w), workload), recorder, config).run()
    finally:
        recorder.close()
