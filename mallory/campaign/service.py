"""The learner side of a campaign, as the loop sees it: a small protocol, and the in-process
implementation every single-process campaign uses.

The loop (loop.py, the worker side: it owns a cluster, enacts faults, observes windows, runs
the checks) asks a `LearnerService` for what only the learner knows: which fault to take
next (or a whole schedule's plan), what a window was (a state, a reward, new pairs, new
model states), whether a bug is new. One service
may serve several workers at once (`hub.py`, behind a Ray actor: `ray_engine.py`); each call
names its worker, and each worker's schedules form one trajectory through the shared states,
tables and coverage (`Learner.fork`). The protocol, per worker, is the loop's order:

    counters()                                 # once, when the worker starts
    per schedule:
        plan(w, actions, steps, window_s, seed) -> Plan | None
                                               # a policy that plans schedules (modelfuzz) plans it
        observe(w, Transition(action=None))    # the window before the first step
        per step:
            decide(w, actions) -> Decision     # the fault for the next window (not asked
                                               # when the schedule plays a plan: its step is it)
            observe(w, Transition(action))     # that window, with the action really taken
        end_schedule(w)                        # before the reset: the last transition is terminal
        report_bug(w, bug) -> new?             # per finding of the schedule's checks
        schedule_done(w, record)               # the schedule is whole: the learner is checkpointed

Contract of an implementation: `observe` learns the transition from the action the worker
says it took, whatever `decide` answered (a worker may have decided without it: `Decision`'s
`fallback`); a transition whose window taught nothing (`Transition.window` None: late, or a
gap in the observation) moves nothing; a plan is the worker's trajectory's, played by the
actions `observe` says were taken while they are its steps (a `decide` ends it: the worker
never got it), and what was played of it is what the policy hears at `end_schedule`
(modelfuzz keeps it if it reached new model states); `end_schedule` forgets the worker's
trajectory;
`schedule_done` has made the learning of every schedule done so far durable before it
returns (the worker then writes its schedule record: a recorded schedule is never missing
from the checkpoint). Calls of one worker come in that order; calls of different workers
interleave freely. Nothing here is Ray: the path without `--workers` never imports it.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.learner.corpus import Plan
from mallory.learner.learner import Learner
from mallory.learner.model import ModelTrace
from mallory.learner.policies import ModelFuzzPolicy

#: the worker name of a single-process campaign
LOCAL = "local"


@dataclass(frozen=True)
class WindowSeen:
    """What a complete, fully observed window showed: its abstraction (`summary`), its
    event pairs, the waypoint level it reached, the fault families in force (one per
    fault) and, when the campaign has a protocol model, what its trace did in the model
    (the worker replays it: campaign/model.py; None: no model)."""

    summary: frozenset[str]
    pairs: frozenset[str] = frozenset()
    waypoint: int = 0
    faults: tuple[str, ...] = ()
    model: ModelTrace | None = None


@dataclass(frozen=True)
class ModelTotals:
    """The campaign's model coverage so far: the distinct model states and transitions
    reached, and the steps the model could not take (all 0 without a model)."""

    states: int = 0
    transitions: int = 0
    mismatches: int = 0

    @classmethod
    def of(cls, learner: Learner) -> ModelTotals:
        coverage = learner.model_coverage
        return cls(len(coverage.states), len(coverage.transitions), coverage.mismatch_count())


@dataclass(frozen=True)
class Transition:
    """One window of a worker's schedule and what led into it.

    `action`: the action taken before the window (None: the window before a schedule's
    first step), one of `actions`, the actions offered then; `chosen`: whether it was chosen
    for this campaign (by the learner, or by a worker without it) rather than replayed from
    a script (replay, shrink), which is not learnt. `window`: what it showed, None
    when it taught nothing (late, or a component restarted during it); `pairs` of a late
    window are not counted either. The rest is for the campaign's merged statistics:
    `feedback_ms` (how long the timeline took to give the window; None when late),
    `decision_ms` (how long the decision before it took), `fallback` (how the worker chose
    the action without the learner: Decision.fallback), `late`."""

    action: str | None = None
    actions: tuple[str, ...] = ()
    chosen: bool = True
    window: WindowSeen | None = None
    feedback_ms: float | None = None
    decision_ms: float | None = None
    fallback: str | None = None
    late: bool = False


@dataclass(frozen=True)
class Observation:
    """The learner's answer to a transition: the campaign's `states` and `pairs_covered`
    now, and, when the window taught something, its state, whether that is new, its reward,
    the pairs it added to the coverage, the model states it added to the model coverage
    and `policy_state`, what the policy knows the worker's position by (a worker deciding
    without the learner uses it). Without a lesson, those are None and the counts 0.
    `model`: the campaign's model coverage now."""

    states: int
    pairs_covered: int
    state_id: int | None = None
    is_new: bool | None = None
    reward: float | None = None
    new_pairs: int = 0
    policy_state: int | None = None
    new_model_states: int = 0
    model: ModelTotals = ModelTotals()


@dataclass(frozen=True)
class Decision:
    """The action to take, and `fallback`: None when the learner chose it, else how the
    worker chose without it ("snapshot": its copy of the policy; "random": it had none)."""

    action: str
    fallback: str | None = None


@dataclass(frozen=True)
class Counters:
    """The campaign's totals as the learner side knows them, and the policy's name."""

    states: int
    pairs_covered: int
    bugs: int
    policy: str
    model: ModelTotals = ModelTotals()


@dataclass
class BugReport:
    """A finding of a worker's checks: its signature deduplicates across workers, `report`
    explains it, `schedule` is the worker's record of the schedule that showed it, `files`
    go into a new bundle (the run directory), `config` is what replay needs, `sighting` what
    this schedule saw of it (the bundle's sightings.jsonl line; the worker is added)."""

    signature: str
    report: dict[str, Any]
    schedule: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    config: CampaignConfig | None = None
    sighting: dict[str, Any] = field(default_factory=dict)


def pack_files(files: Iterable[Path]) -> bytes:
    """The files and directories of a bug's bundle (a run directory) as one tar.gz, each
    under its own name, for a learner on another machine."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path in files:
            path = Path(path)
            if path.exists():
                tar.add(path, arcname=path.name)
    return out.getvalue()


def unpack_files(archive: bytes, into: Path) -> list[Path]:
    """What `pack_files` packed, unpacked into the directory `into`; the top-level paths.
    Only plain files and directories come out, and only inside `into` (tarfile's "data"
    filter): an archive is another machine's word."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    return sorted(into.iterdir())


class LearnerService(Protocol):
    """The learner side of the campaign loop; the module docstring states the contract."""

    def counters(self) -> Counters: ...

    def plan(self, worker: str, actions: Sequence[str], steps: int, window_s: float, seed: int) -> Plan | None:
        """The plan of the worker's schedule about to start (Policy.plan: at most `steps`
        steps among `actions`, windows near `window_s`, `seed` the schedule's own); None:
        the policy chooses step by step."""
        ...

    def decide(self, worker: str, actions: Sequence[str]) -> Decision: ...

    def observe(self, worker: str, transition: Transition) -> Observation: ...

    def end_schedule(self, worker: str) -> None: ...

    def report_bug(self, worker: str, bug: BugReport) -> bool:
        """Record the bug (a bundle on its first sighting, a sighting after); True when no
        worker had reported it before."""
        ...

    def schedule_done(self, worker: str, record: dict[str, Any]) -> None: ...


def learn(learner: Learner, transition: Transition) -> Observation:
    """Feed one transition to one trajectory (a learner or a fork of one): the action taken
    first (unless it is the one the learner chose, or a scripted one), then the window."""
    taken = transition.action
    if taken is not None and transition.chosen and learner.state is not None and learner.acting != taken:
        learner.take(taken, transition.actions)
    window = transition.window
    covered, modelled = len(learner.coverage), len(learner.model_coverage.states)
    seen = learner.observe_window(
        None if window is None else window.summary,
        () if window is None else window.pairs,
        0 if window is None else window.waypoint,
        () if window is None else window.faults,
        None if window is None else window.model,
    )
    if seen is None:
        return Observation(len(learner.store), len(learner.coverage), model=ModelTotals.of(learner))
    match, reward = seen
    return Observation(len(learner.store), len(learner.coverage), match.state_id, match.is_new, reward,
                       len(learner.coverage) - covered, learner.state,
                       len(learner.model_coverage.states) - modelled, ModelTotals.of(learner))


def checkpoint(learner: Learner, directory: CampaignDir) -> None:
    """Save the learner's checkpoint in `directory`, then mirror modelfuzz's corpus in
    DIR/corpus/ (after the checkpoint, which is its truth)."""
    directory.save_learner(learner.to_checkpoint())
    if isinstance(learner.policy, ModelFuzzPolicy):
        directory.sync_corpus(learner.policy.corpus)


def counters_of(learner: Learner, bugs: int) -> Counters:
    """The totals of `learner`'s campaign, which holds `bugs` bugs."""
    return Counters(len(learner.store), len(learner.coverage), bugs, learner.policy.name, ModelTotals.of(learner))


class LocalLearner:
    """The learner of a single-process campaign, in this process: one trajectory, its
    checkpoint and bugs in the campaign directory (what `mallory fuzz` without --workers
    always did). `worker` names are ignored: there is one."""

    def __init__(self, learner: Learner, directory: CampaignDir) -> None:
        self.learner = learner
        self.dir = directory

    def counters(self) -> Counters:
        return counters_of(self.learner, len(self.dir.known_bugs()))

    def plan(self, worker: str, actions: Sequence[str], steps: int, window_s: float, seed: int) -> Plan | None:
        return self.learner.plan(actions, steps, window_s, seed)

    def decide(self, worker: str, actions: Sequence[str]) -> Decision:
        return Decision(self.learner.next_action(actions))

    def observe(self, worker: str, transition: Transition) -> Observation:
        return learn(self.learner, transition)

    def end_schedule(self, worker: str) -> None:
        self.learner.end_schedule()

    def report_bug(self, worker: str, bug: BugReport) -> bool:
        known = self.dir.known_bugs()
        bundle = self.dir.record_bug(bug.signature, bug.report, bug.schedule, bug.files, bug.config, bug.sighting)
        return bundle.name not in known

    def schedule_done(self, worker: str, record: dict[str, Any]) -> None:
        checkpoint(self.learner, self.dir)


def learner_for(directory: CampaignDir, config: CampaignConfig) -> Learner:
    """The campaign's learner: its checkpoint's, or a new one as the configuration says."""
    saved = directory.load_learner()
    if saved is not None:
        return Learner.from_checkpoint(saved)
    params = {key: value for key, value in (("temperature", config.temperature), ("prior", config.prior))
              if value is not None}
    return Learner.create(policy=config.policy, reward=config.reward, seed=config.seed,
                          threshold=config.threshold, policy_params=params, context=config.context)
