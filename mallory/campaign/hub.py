"""The learner side of a campaign with several workers: one learner, its bugs, the merged
counters, in the campaign directory.

`LearnerHub` answers the calls of the `LearnerService` protocol (service.py) for any number
of workers at once, each a loop with a cluster of its own (workers.py) whose `RemoteLearner`
(remote.py) makes the calls (`decide` answers an action, or None: the worker decides;
`report_bug` takes the bug's files as an archive; `plan` and the first look of a schedule
end the worker's last schedule if its end never came), and adds what only a shared
learner needs: schedule tickets (`begin_schedule`, so `--schedules N` means N in all), a copy
of the policy for deciding without it (`snapshot`), and forgetting a dead worker
(`worker_gone`). It is a plain object: ray_engine.py makes it a Ray actor (one call at a
time: the actor runs its methods one after another, so nothing here locks), the unit tests
call it directly.

What it keeps, in the campaign directory DIR on its own machine:

    DIR/learner              the checkpoint of the one learner: every worker's schedules
                             train it (each worker a trajectory, `Learner.fork`); saved
                             after every schedule any worker finishes
    DIR/corpus/              modelfuzz's kept schedules, whichever worker played them
    DIR/schedules/NNNNNN.json every worker's finished schedules, numbered in the order they
                             ended, each with its `worker` and `worker_index`
    DIR/bugs/<signature>/    one bundle per bug, whichever worker found it: the first
                             report's files (shipped as an archive), a sighting per later
                             report, each naming its `worker`
    DIR/fuzzer_stats, DIR/plot_data
                             the merged counters: a plot line per step of any worker; the
                             stats add `workers`, the decision latency of every worker's
                             steps and this process's resident memory (`learner_rss_mb`)

A hub made again on the same directory (the actor restarted after a death, or `--resume`
with any number of workers) continues from there: the checkpoint, the records, the bugs,
the run time. What it held in memory only is lost: the trajectories of the schedules in
flight (their workers keep going; those transitions are not learnt) and their tickets.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import (
    campaign_stats,
    count_model,
    plot_row,
    restore_progress,
)
from mallory.campaign.progress import Progress
from mallory.campaign.service import (
    BugReport,
    Counters,
    Observation,
    Transition,
    checkpoint,
    counters_of,
    learn,
    learner_for,
    unpack_files,
)
from mallory.learner.corpus import Plan
from mallory.learner.learner import Learner


def resident_mb() -> float | None:
    """This process's resident memory in MiB (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


class LearnerHub:
    def __init__(self, root: Path | str, schedules: int | None = None) -> None:
        """The hub of the campaign in `root` (its campaign.json written: a new campaign, or
        one resumed). `schedules`: how many schedules the campaign may hold in all, the
        ones done included (None: no limit; the deadline is the workers')."""
        self.dir = CampaignDir(Path(root))
        config = self.dir.config()
        self.learner = learner_for(self.dir, config)
        self.trajectories: dict[str, Learner] = {}
        self.limit = schedules
        #: workers holding a ticket for a schedule they have not finished
        self.in_flight: set[str] = set()
        self.progress = restore_progress(self.dir, self.counters())
        self.banner = f"{Path(config.sut).name} x{config.nodes}"
        self.command_line = shlex.join(config.command)
        #: whether the campaign has a protocol model (its counters in the merged stats then)
        self.model = config.model is not None

    # -- the LearnerService protocol ---------------------------------------------------

    def counters(self) -> Counters:
        return counters_of(self.learner, len(self.dir.known_bugs()))

    def plan(self, worker: str, actions: list[str], steps: int, window_s: float, seed: int) -> Plan | None:
        trajectory = self._trajectory(worker)
        self._end_unfinished(trajectory)
        return trajectory.plan(actions, steps, window_s, seed)

    def decide(self, worker: str, actions: list[str]) -> str | None:
        """The action for the worker's next window; None when the hub does not know where
        the worker is (it restarted during the worker's schedule): the worker decides."""
        trajectory = self._trajectory(worker)
        if trajectory.state is None:
            return None
        return trajectory.next_action(actions)

    def observe(self, worker: str, transition: Transition) -> Observation:
        trajectory = self._trajectory(worker)
        if transition.action is None:
            self._end_unfinished(trajectory)
        observed = learn(trajectory, transition)
        p = self.progress
        p.states, p.pairs_covered = observed.states, observed.pairs_covered
        count_model(p, observed.model)
        if transition.feedback_ms is not None:
            p.feedback_ms.append(transition.feedback_ms)
        if observed.state_id is not None:
            p.current_state = observed.state_id
            if observed.is_new:
                p.last_new_state_s = p.elapsed_s()
            if observed.new_pairs:
                p.last_new_pair_s = p.elapsed_s()
            if observed.new_model_states:
                p.last_new_model_state_s = p.elapsed_s()
            if transition.window is not None:
                p.deepest_waypoint = max(p.deepest_waypoint, transition.window.waypoint)
        if transition.action is not None:  # a step (not a schedule's first look)
            p.steps_done += 1
            p.late_steps += transition.late
            p.current_fault = transition.action
            if transition.decision_ms is not None:
                p.decision_ms.append(transition.decision_ms)
            for series in (p.decision_ms, p.feedback_ms):  # percentiles read the last 10 000
                del series[:-10_000]
            p.fallback_decisions += transition.fallback is not None
            entry = {"action": transition.action, "state": observed.state_id, "new": observed.is_new,
                     "waypoint": transition.window.waypoint if transition.window is not None else 0}
            self.dir.append_plot(plot_row(p, entry, transition.feedback_ms, self.model))
            self._write_stats()
        return observed

    def end_schedule(self, worker: str) -> None:
        self._trajectory(worker).end_schedule()

    def report_bug(self, worker: str, bug: BugReport, archive: bytes | None = None) -> bool:
        """Record a worker's finding: a new bug's bundle from `archive` (`pack_files` of its
        files: the worker's machine may be another), a known one's sighting. True when it
        is new."""
        known = self.dir.known_bugs()
        incoming = self.dir.root / "bugs" / f".incoming-{worker}"
        shutil.rmtree(incoming, ignore_errors=True)
        try:
            files = unpack_files(archive, incoming) if archive is not None else []
            schedule = {**bug.schedule, "worker": worker}
            sighting = {**bug.sighting, "worker": worker, "worker_schedule": bug.schedule.get("index")}
            bundle = self.dir.record_bug(bug.signature, bug.report, schedule, files, bug.config, sighting)
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
        new = bundle.name not in known
        if new:
            self.progress.bugs = len(known) + 1
            self.progress.last_bug_s = self.progress.elapsed_s()
        return new

    def schedule_done(self, worker: str, record: dict[str, Any]) -> int:
        """Checkpoint the learner, then file the worker's schedule record under the next
        number (what the number is, returned). Checkpoint first: a recorded schedule's
        learning is never missing from the checkpoint."""
        checkpoint(self.learner, self.dir)
        index = self.dir.schedules_done()
        self.dir.write_schedule(index, {**record, "index": index, "worker": worker, "worker_index": record.get("index")})
        self.in_flight.discard(worker)
        p = self.progress
        p.schedules_done += 1
        reached = record.get("waypoint")
        if reached:
            p.waypoints_reached[reached] = p.waypoints_reached.get(reached, 0) + 1
        self._write_stats()
        return index

    # -- what a shared learner adds ----------------------------------------------------

    def begin_schedule(self, worker: str) -> bool:
        """May the worker start another schedule? No once the campaign holds `schedules`,
        counting those in flight. A worker asking again without finishing (its schedule was
        dropped) keeps its ticket."""
        if self.limit is not None and worker not in self.in_flight:
            if self.progress.schedules_done + len(self.in_flight) >= self.limit:
                return False
        self.in_flight.add(worker)
        return True

    def bug_known(self, signature: str) -> bool:
        """Has any worker reported this bug? (A worker ships a bundle's files only if not.)"""
        return CampaignDir.bundle_name(signature) in self.dir.known_bugs()

    def snapshot(self) -> dict[str, Any]:
        """A copy of the policy (`Policy.to_state`), for a worker to decide from when the
        hub does not answer in time."""
        return self.learner.policy.to_state()

    def worker_gone(self, worker: str) -> None:
        """The worker died: its trajectory and its ticket go (its learning stays)."""
        self.trajectories.pop(worker, None)
        self.in_flight.discard(worker)
        self._write_stats()

    def progress_now(self) -> Progress:
        """The merged counters (for the status screen and the closing summary)."""
        return self.progress

    def close(self) -> None:
        """The campaign ends: the checkpoint and the merged stats, last versions."""
        checkpoint(self.learner, self.dir)
        self.progress.schedule_running = False
        self._write_stats()

    # -- inside --------------------------------------------------------------------------

    @staticmethod
    def _end_unfinished(trajectory: Learner) -> None:
        """A schedule's start (its plan, or its first look) while the last one is still
        open: the worker's end_schedule never arrived (it timed out), so that schedule ends
        here, not with a transition (a waypoint level, a plan) carried into this one."""
        if trajectory.state is not None:
            trajectory.end_schedule()

    def _trajectory(self, worker: str) -> Learner:
        found = self.trajectories.get(worker)
        if found is None:
            found = self.trajectories[worker] = self.learner.fork()
        return found

    def _write_stats(self) -> None:
        self.progress.schedule_running = bool(self.in_flight)
        info = {"workers": len(self.trajectories), "learner_rss_mb": resident_mb(), "learner_pid": os.getpid()}
        self.dir.write_stats(campaign_stats(self.progress, self.banner, self.command_line, self.learner.policy.name,
                                            info, self.model))
