"""The live parts of a campaign, set up and torn down in one place (fuzz, its workers and
replay share it), and what runs on them before fuzzing (calibration, waypoints).

Order: the observed cluster (mediator, observers), then the SUT with the clock/disk fault
controls in its environment, then the nemesis and the per-schedule checks. Teardown runs
in reverse whatever happened, so nothing outlives the command. With filter sets
(`filter_sets` in the configuration) the mediator runs the message layer with them and the
nemesis offers each as a fault (nemesis/faults/filters.py); without, neither exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import (
    MIN_CALIBRATION_WINDOWS,
    NO_WORKLOAD,
    Calibration,
    CampaignConfig,
)
from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import (
    Campaign,
    RealSleeper,
    ScriptedStep,
    report_json,
    steady_summaries,
)
from mallory.campaign.model import ModelFeed, bind_model, load_model
from mallory.campaign.netns_stack import ObservedCluster
from mallory.campaign.observed import message_layer_args
from mallory.campaign.waypoints import Waypoints, load_waypoints
from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.harness.adapter import ProcessAdapter, SutAdapter, TakesEnvOverlay
from mallory.harness.runner import RunConfig
from mallory.harness.session import start_all, teardown_all
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.learner.calibration import calibrate_threshold
from mallory.learner.learner import Learner
from mallory.learner.policies import SAMPLER_FAULTS
from mallory.learner.states import StateStore
from mallory.mediator.client import TimelineWindows
from mallory.suts.registry import make_adapter
from nemesis.faults.filters import FilterSetFaults
from nemesis.nemesis import Nemesis

log = logging.getLogger(__name__)


@dataclass
class LiveParts:
    stack: ObservedCluster
    adapter: SutAdapter
    nemesis: Any
    checks: ScheduleChecks
    windows: TimelineWindows

    def record_action(self, action: str, report: Any) -> None:
        """A fault taken: a FAULT event in the timeline, a :nemesis :info op in the history."""
        self.stack.client.fault_reported(action)
        self.checks.nemesis_op(action, report_json(report))

    def event_catalogue(self) -> Catalogue:
        """The annotation catalogue the build wrote next to the SUT's program (empty when
        there is none: an uninstrumented program, or one the adapter starts otherwise)."""
        if isinstance(self.adapter, ProcessAdapter):
            program = self.adapter.command(self.adapter.backend.nodes[0])[0]
            path = Path(catalogue_path(program))
            if path.exists():
                return Catalogue.load(path)
        return Catalogue()

    def log_event_names(self) -> list[str]:
        """The names of the SUT's declared log events (unnamed ones are named by message)."""
        patterns = self.adapter.log_events if isinstance(self.adapter, ProcessAdapter) else ()
        return [p.name for p in patterns if p.name]


class CampaignRefused(MalloryError):
    """What the campaign's configuration asks of its SUT, which the SUT's cluster, once up,
    shows it cannot do (a sampler policy's fault). Any cluster of the SUT would refuse it
    alike, so a campaign with workers ends on it instead of replacing the worker
    (ray_engine.py)."""


def check_sampler_fault(config: CampaignConfig, nemesis: Nemesis) -> None:
    """A sampler policy's fault must be one the SUT can take: refused before fuzzing, with
    the nemesis's reason (CampaignRefused; the SUT cannot be asked before its cluster is up)."""
    fault = SAMPLER_FAULTS.get(config.policy)
    if fault is not None and fault not in nemesis.actions():
        reason = nemesis.refused.get(fault, "not enabled by --faults")
        raise CampaignRefused(f"--policy {config.policy} takes {fault}, which {config.sut} cannot: {reason}")


def filter_set_faults(path: Path) -> FilterSetFaults:
    """The fault family of the filter-set file `path` (ScenarioError, a bad-input
    MalloryError, for a file that is not one)."""
    from mallory.harness.scenario_file import load_filter_sets
    from mallory.scenario.roles import roles_named

    return FilterSetFaults({name: roles_named(s.filters) for name, s in load_filter_sets(path).items()})


@contextmanager
def live_parts(config: CampaignConfig, directory: CampaignDir, run_name: str) -> Iterator[LiveParts]:
    from nemesis.faults.base import FaultContext
    from nemesis.faults.controls import NodeControls
    from nemesis.nemesis import Nemesis, default_families, schedule_families

    def adapter_factory(backend: Any) -> SutAdapter:
        return make_adapter(config.sut, backend, config.port)

    families = [*default_families(), *schedule_families(config.window_s, config.rounds_d, config.rounds_k,
                                                         config.drop_p, config.crash_rate)]
    mediator_args = None
    if config.filter_sets is not None:
        families.append(filter_set_faults(Path(config.filter_sets)))

        def mediator_args(adapter: Any) -> list[str]:
            return message_layer_args(adapter, config.sut, ["--filter-sets", str(config.filter_sets)])

    if config.backend == "docker":  # inside a compose project (deploy/compose)
        from mallory.campaign.docker_stack import ObservedDockerCluster

        stack: Any = ObservedDockerCluster.from_env(
            run_name, config.nodes, record_dir=directory.root / "events", adapter_factory=adapter_factory
        )
    else:
        stack = ObservedCluster(
            run_name, config.nodes, record_dir=directory.root / "events", adapter_factory=adapter_factory,
            mediator_args=mediator_args,
        )
    adapter = checks = None
    try:
        backend = stack.cluster
        atomic_write(directory.root / "cluster.json", backend.layout.to_json().encode())
        adapter = stack.adapter
        controls = NodeControls(backend.record, list(backend.nodes)).prepare()
        # An adapter that cannot take the shim's env goes without: the nemesis refuses
        # clock and disk faults on an SUT process it sees without the shim.
        if isinstance(adapter, TakesEnvOverlay):
            adapter.add_env_overlay(controls)
        start_all(adapter)
        ctx = FaultContext(backend=backend, adapter=adapter, mediator=stack.client, controls=controls)
        nemesis = Nemesis(ctx, config.faults, families)
        workload = None if config.workload == NO_WORKLOAD else config.workload
        run_config = RunConfig(concurrency=config.concurrency, rate=config.rate, seed=config.seed)
        leader_line = adapter.leader_line if isinstance(adapter, ProcessAdapter) else ""
        checks = ScheduleChecks(adapter, directory, workload, run_config, leader_line=leader_line)
        yield LiveParts(stack, adapter, nemesis, checks, TimelineWindows(stack.client, config.abstraction))
    finally:
        if checks is not None:
            checks.close()
        if adapter is not None:
            teardown_all(adapter)
        stack.close()


def replay_script(config: CampaignConfig, directory: CampaignDir, run_name: str, script: list[ScriptedStep],
                  seed: int | None) -> dict[str, Any]:
    """Enact a scripted schedule once on a fresh cluster (`mallory replay`, `mallory shrink`)
    into a new campaign directory; the schedule's record, with its findings."""
    directory.create(config)
    with live_parts(config, directory, run_name) as live:
        # The learner only observes here; it never chooses.
        campaign = Campaign(directory, Learner.create(policy="random"), live.windows, live.nemesis, config.loop_config(),
                            checker=live.checks, on_action=live.record_action, watchdog=live.stack)
        return campaign.run_schedule(0, script=script, seed=seed)


def calibrate(config: CampaignConfig, directory: CampaignDir, live: LiveParts) -> CampaignConfig:
    """The paper's calibration: fault-free windows under load set the similarity threshold.
    The calibrated configuration is written to the campaign directory before it is used."""
    log.info("calibrating on %d fault-free windows under load...", config.calibrate)
    run_dir = directory.root / "runs" / "calibration"
    run_dir.mkdir(parents=True, exist_ok=True)
    live.checks.start_workload(run_dir, config.seed, key_slot=0)
    try:
        summaries = steady_summaries(live.windows, RealSleeper(), config.calibrate, config.window_s)
    finally:
        live.checks.stop_workload()
    if len(summaries) < MIN_CALIBRATION_WINDOWS:
        raise MalloryError(f"calibration: only {len(summaries)} complete windows; the timeline is not keeping up")
    # The largest threshold that makes 90% coincide is 1.0 when the steady windows are all
    # alike: as discriminating as exact equality, which would split every faulty window
    # from its neighbours. It lowers the configured threshold; it never raises it.
    largest = calibrate_threshold(summaries)
    threshold = min(largest, config.threshold)
    store = StateStore(threshold=threshold)
    for summary in summaries:
        store.lookup(summary)
    log.info("calibration: %d fault-free windows fall into %d state(s) at threshold %.3f (90%% coincide up to %.3f; "
             "configured %s)", len(summaries), len(store), threshold, largest, config.threshold)
    calibrated = replace(config, threshold=threshold, calibration=Calibration(
        windows=len(summaries), threshold=threshold, largest=largest, steady_states=len(store)))
    directory.write_config(calibrated)
    return calibrated


def live_model(config: CampaignConfig, live: LiveParts) -> ModelFeed | None:
    """The campaign's protocol model, its event names resolved against the SUT's catalogue
    and log events; the mediator's windows carry the traces it needs from then on."""
    if config.model is None:
        return None
    feed = bind_model(load_model(Path(config.model)), live.adapter.backend.nodes, live.event_catalogue(),
                      live.log_event_names())
    live.windows.trace = feed.trace_types
    return feed


def live_waypoints(config: CampaignConfig, live: LiveParts) -> Waypoints | None:
    """The campaign's waypoints, their event names resolved against the SUT's catalogue and
    log events, their fault families against the nemesis's."""
    if config.waypoints is None:
        return None
    families = {label.partition(":")[0] for label in live.nemesis.actions()}
    return load_waypoints(Path(config.waypoints), live.event_catalogue(), live.log_event_names(), families)
