"""A campaign worker: one cluster on the machine it runs on, its schedules, a shared learner.

With `mallory fuzz --workers N`, each of the N workers runs what a single-process campaign
runs (live.py's parts on this machine, the loop of loop.py), in a directory of its own,
`DIR/workers/<name>/` on its machine (DIR: the campaign directory's path, the same on every
machine), against a learner it shares with the others (remote.py's `RemoteLearner`). That
directory holds the worker's own campaign.json (the campaign's, with a root seed of the
worker's own, so two workers' faults draw different targets), fuzzer_stats and plot_data
(its own steps), schedules and runs (Jepsen-style histories and node logs), events and
cluster.json. What is shared (learner checkpoint, bugs, merged stats) is the hub's, in DIR
on the hub's machine (hub.py). A worker restarted with the same name on the same machine
continues its own numbering from its directory.

Nothing here is Ray: ray_engine.py runs these functions inside Ray actors and tasks.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.live import (
    calibrate,
    check_sampler_fault,
    live_model,
    live_parts,
    live_waypoints,
)
from mallory.campaign.loop import Campaign
from mallory.campaign.remote import RemoteLearner
from mallory.cluster.registry import cleanup_run, list_runs, run_status

log = logging.getLogger(__name__)

#: how long a dead worker's run may still look live (its owner process not yet reaped)
OWNER_GONE_WAIT_S = 10.0


def worker_name(k: int) -> str:
    return f"w{k}"


def worker_seed(root_seed: int, worker: str) -> int:
    """A worker's root seed, derived from the campaign's (stable across runs)."""
    digest = hashlib.blake2b(f"{root_seed}:worker:{worker}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def worker_directory(root: Path, worker: str, config: CampaignConfig) -> CampaignDir:
    """The worker's own campaign directory under `root`, made on first use with the
    campaign's configuration under the worker's seed, and taken as it is after."""
    directory = CampaignDir(Path(root) / "workers" / worker)
    if not (directory.root / "campaign.json").exists():
        directory.create(replace(config, seed=worker_seed(config.seed, worker)))
    return directory


@dataclass(frozen=True)
class WorkerSummary:
    """What a worker did in this incarnation of the campaign."""

    worker: str
    schedules: int
    steps: int
    fallback_decisions: int
    decision_ms_p50: float | None
    decision_ms_p99: float | None


def run_worker(root: Path, worker: str, config: CampaignConfig, run_name: str, service: RemoteLearner, *,
               seconds: float | None, stop: Callable[[], bool]) -> WorkerSummary:
    """Bring up the worker's cluster (run `run_name` on this machine), take schedules while
    the learner grants them, `seconds` have not passed and `stop()` is false, tear it all
    down. `config`: the campaign's (calibrated, if it calibrates)."""
    directory = worker_directory(root, worker, config)
    own = directory.config()
    deadline = None if seconds is None else time.monotonic() + seconds

    def stop_now() -> bool:
        return stop() or (deadline is not None and time.monotonic() >= deadline)

    with live_parts(own, directory, run_name) as live:
        check_sampler_fault(own, live.nemesis)
        campaign = Campaign(directory, service, live.windows, live.nemesis, own.loop_config(), checker=live.checks,
                            on_action=live.record_action, info={"cluster_run": run_name},
                            waypoints=live_waypoints(own, live), watchdog=live.stack, worker=worker,
                            model=live_model(own, live))
        before = campaign.progress.schedules_done, campaign.progress.steps_done
        while not stop_now() and service.begin_schedule(worker):
            campaign.run(schedules=1, stop=stop_now)
    p = campaign.progress
    return WorkerSummary(worker, p.schedules_done - before[0], p.steps_done - before[1], p.fallback_decisions,
                         p.decision_percentile(0.5), p.decision_percentile(0.99))


def calibrate_worker(root: Path, worker: str, config: CampaignConfig, run_name: str) -> CampaignConfig:
    """Calibrate the campaign's similarity threshold on this worker's cluster (a cluster of
    its own, torn down after); the calibrated configuration (the campaign's, not the
    worker's: the driver writes it into DIR)."""
    directory = worker_directory(root, worker, config)
    with live_parts(directory.config(), directory, run_name) as live:
        calibrated = calibrate(config, directory, live)
    # the worker's campaign.json got the campaign's seed: give it back its own
    directory.write_config(replace(calibrated, seed=worker_seed(config.seed, worker)))
    return calibrated


def clean_dead_run(run_name: str, wait_s: float = OWNER_GONE_WAIT_S) -> list[str]:
    """Remove what a dead worker's cluster run left on this machine (its namespaces, links,
    processes, shm: the run registry's journal), as `mallory cleanup RUN` would. Only a
    stale run is touched: one whose owner (the worker's process) is gone; a run whose owner
    is still dying gets `wait_s` to show as gone. What was removed (empty: nothing to do)."""
    record = next((r for r in list_runs() if r.name == run_name), None)
    if record is None:
        return []
    deadline = time.monotonic() + wait_s
    while run_status(record) == "live" and time.monotonic() < deadline:
        time.sleep(0.2)
    status = run_status(record)
    if status != "stale":
        log.warning("run %s is %s, not stale: left alone", run_name, status)
        return []
    return cleanup_run(record)
