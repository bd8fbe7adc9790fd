"""The live parts of a campaign, set up and torn down in one place (fuzz and replay share it).

Order: the observed cluster (mediator, observers), then the SUT with the clock/disk fault
controls in its environment, then the nemesis and the per-schedule checks. Teardown runs
in reverse whatever happened, so nothing outlives the command. With filter sets
(`filter_sets` in the configuration) the mediator runs the message layer with them and the
nemesis offers each as a fault (nemesis/faults/filters.py); without, neither exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import NO_WORKLOAD, CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import Campaign, ScriptedStep, report_json
from mallory.campaign.netns_stack import ObservedCluster
from mallory.campaign.observed import message_layer_args
from mallory.files import atomic_write
from mallory.harness.adapter import ProcessAdapter, SutAdapter, TakesEnvOverlay
from mallory.harness.runner import RunConfig
from mallory.harness.session import start_all, teardown_all
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.learner.learner import Learner
from mallory.mediator.client import TimelineWindows
from mallory.suts.registry import make_adapter
from nemesis.faults.filters import FilterSetFaults


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
