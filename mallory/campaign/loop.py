"""The campaign's observe-orient-decide-act loop.

A campaign is a sequence of schedules. A schedule starts from a healthy cluster, observes
one window to know where it is, then takes `steps` steps: the learner picks an action, the
nemesis enacts it, the loop waits one window while the workload keeps running, asks the
timeline for that window's summary, and the learner turns it into a state and a reward.
Then everything is healed and the cluster is reset, the schedule's record is written, the
checks run, and the learner is checkpointed: a killed campaign loses at most the schedule
in flight.

A policy that plans whole schedules (modelfuzz, learner/corpus.py) hands its plan over at
the schedule's start (`LearnerService.plan`): the schedule's seed and each step's action,
draw and window, so that a kept schedule played again hits the same nodes. The loop plays
the plan's steps as they are (no decision to ask for), and the learner side learns each as
the action taken.

Faults accumulate within a schedule (a partition, then a kill while it lasts); besides the
nemesis's actions the learner may choose `heal` (heal every active fault, Jepsen's :stop)
or `noop`. A fault the nemesis says lasts one window (a filter set: `one_window`) is healed
as soon as its step's window is observed (its window is still judged with it in force).

The campaign's own machinery can die too (a watchdog, `Watchdog`, is asked at the start of
a schedule, after every step's window and after the reset, so a death is noticed within one
step). A component the watchdog restarted (an observer) leaves a gap in what was observed:
that step's window teaches the learner nothing (like a late one), the schedule's record
lists the gap under `unobserved`, and its findings are kept out of the bugs (listed as
`unobserved_findings`): packets the dead component held were dropped, a fault nobody chose.
A component it cannot restart (the mediator) raises `ComponentDied`: the schedule in flight
is dropped whole (no record, no learner checkpoint), so `--resume` redoes it.

With a protocol model (campaign/model.py), every observed window's trace is replayed
through it as well: a schedule is one execution of the model (restarted when the schedule
starts, and when a component's death lost events; its trace then starts with the next
window), and what it reached goes to the learner with the window (its model coverage, the
`model` reward).

The loop does no I/O of its own beyond the campaign directory: the window source (the
mediator's timeline), the nemesis, the checks and the clock are handed in, so the same loop
runs against a live cluster and, in tests, against named fakes. So is the learner side
(service.py): a `Learner` is served in this process (`LocalLearner`); a campaign with
several workers hands each worker's loop a service that reaches one shared learner
(remote.py), and the loop is the same. How long each decision took is measured here
(`decision_ms` in fuzzer_stats), whoever made it.
"""

from __future__ import annotations

import hashlib
import random
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Protocol

from mallory.campaign.afl import afl_plot_values, afl_stats
from mallory.campaign.config import LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.model import ModelFeed
from mallory.campaign.progress import Progress
from mallory.campaign.service import (
    LOCAL,
    BugReport,
    Counters,
    LearnerService,
    LocalLearner,
    ModelTotals,
    Transition,
    WindowSeen,
)
from mallory.campaign.waypoints import Waypoints
from mallory.errors import ExitCode, MalloryError
from mallory.learner.learner import Learner
from mallory.learner.model import ModelTrace
from mallory.mediator.windows import Window

HEAL = "heal"
NOOP = "noop"


class WindowSource(Protocol):
    def now_ns(self) -> int:
        """Now, on the timeline's common axis."""
        ...

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        """The window's summary, waiting up to `wait_s` for the timeline to complete it."""
        ...

    def restart_trace(self) -> None:
        """The next window's trace starts at its own start, not where the last one ended
        (asked only when the campaign has a protocol model)."""
        ...


class Nemesis(Protocol):
    def actions(self) -> list[str]: ...

    def enact(self, action: str, rng: random.Random) -> Any:
        """Enact the fault; return its report (JSON-able, or with `to_json()`)."""
        ...

    def heal(self, report: Any) -> None: ...

    def one_window(self, report: Any) -> bool:
        """Whether the fault lasts its step's window only (healed once that is observed)."""
        ...

    def heal_all(self, reports: list[Any]) -> list[str]:
        """Heal them all in a safe order; what could not be healed now, as problems."""
        ...

    def reset(self) -> Any:
        """Heal everything, restart what is dead, check the cluster is healthy."""
        ...

    def restart_all(self, *, fresh: bool = False) -> Any:
        """Restart every node: when a reset did not bring the cluster back. `fresh`: with
        its data removed, as a new cluster starts."""
        ...


@dataclass
class BugEvidence:
    """A bug found by a check: the signature deduplicates, the report explains, `sighting`
    says what this schedule saw of it (its line of the bundle's sightings.jsonl)."""

    signature: str
    report: dict[str, Any]
    files: list = field(default_factory=list)
    sighting: dict[str, Any] = field(default_factory=dict)


class Checker(Protocol):
    def begin_schedule(self, index: int) -> None:
        """The schedule starts (e.g. start its workload, mark where logs end)."""
        ...

    def faults_healed(self) -> None:
        """Every fault of the running schedule is healed now (by the schedule's last heal,
        or by its reset when a heal had to wait for it): from here the cluster should serve."""
        ...

    def check_schedule(self, index: int, record: dict[str, Any]) -> list[BugEvidence]:
        """The schedule ended and the cluster was reset: what did it find?"""
        ...


# How long a failure waits for a component that may be dying to show as dead (see revive_dead).
FAILURE_GRACE_S = 2.0


class ComponentDied(MalloryError):
    """A part of the campaign's machinery died and the campaign cannot go on (the message
    says which, and where its log is)."""

    exit_code = ExitCode.UNAVAILABLE


class Watchdog(Protocol):
    def revive_dead(self, grace_s: float = 0.0) -> list[str]:
        """Restart the components found dead since the last call and wait until they work
        again; their names ("observer n2"), empty when all were alive. ComponentDied for
        one whose death ends the campaign. `grace_s` > 0 after a failure: a component may
        have dropped its connections a moment before it shows as dead (a killed process
        closes its sockets before it becomes a zombie), so one that ends within `grace_s`
        counts as dead."""
        ...


class Sleeper(Protocol):
    def sleep(self, seconds: float) -> None: ...


class RealSleeper:
    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


@dataclass(frozen=True)
class ScriptedStep:
    """One step of a scripted schedule (replay, shrink).

    `draw` is the step number whose random draws the fault makes (its targets): a schedule
    with steps left out still gives each remaining fault the targets it had. `window_s`
    overrides the loop's window for this step (None: the loop's)."""

    action: str
    draw: int
    window_s: float | None = None


def script_of(record: dict[str, Any]) -> list[ScriptedStep]:
    """The script that re-enacts a recorded schedule (records written before steps had a
    `draw` use the step number, which is what they drew with)."""
    return [
        ScriptedStep(step["action"], int(step.get("draw", step.get("step", i))), step.get("window_s"))
        for i, step in enumerate(record.get("steps", []))
    ]


def step_rng(seed: int, draw: int) -> random.Random:
    """The random source of one step's fault, derived from the schedule's seed."""
    return random.Random(schedule_seed(seed, draw))


def steady_summaries(source: WindowSource, sleeper: Sleeper, windows: int, window_s: float) -> list[frozenset[str]]:
    """Summaries of `windows` consecutive fault-free windows, for calibrating the state
    similarity threshold (late windows are skipped: they would be half windows)."""
    out = []
    window_ns = int(window_s * 1e9)
    for _ in range(windows):
        t0 = source.now_ns()
        sleeper.sleep(window_s)
        window = source.window(t0, max(source.now_ns(), t0 + window_ns), 1.0)
        if window.complete:
            out.append(window.summary)
    return out


def schedule_seed(root_seed: int, index: int) -> int:
    """Each schedule's seed, derived from the campaign's root seed (stable across runs)."""
    digest = hashlib.blake2b(f"{root_seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def report_json(report: Any) -> Any:
    if report is None:
        return None
    if hasattr(report, "to_json"):
        return report.to_json()
    if is_dataclass(report):
        return asdict(report)
    return report


class Campaign:
    def __init__(
        self,
        directory: CampaignDir,
        learner: Learner | LearnerService,
        source: WindowSource,
        nemesis: Nemesis,
        config: LoopConfig,
        checker: Checker | None = None,
        sleeper: Sleeper | None = None,
        on_update: Callable[[Progress], None] | None = None,
        info: dict[str, Any] | None = None,
        on_action: Callable[[str, Any], None] | None = None,
        waypoints: Waypoints | None = None,
        watchdog: Watchdog | None = None,
        worker: str = LOCAL,
        model: ModelFeed | None = None,
    ) -> None:
        """`learner`: a Learner (served in this process, checkpointed into `directory`) or
        the service of a shared one, which knows this loop as `worker`."""
        self.dir = directory
        self.learner: LearnerService = LocalLearner(learner, directory) if isinstance(learner, Learner) else learner
        self.worker = worker
        self.source = source
        self.nemesis = nemesis
        self.config = config
        self.checker = checker
        self.sleeper = sleeper or RealSleeper()
        self.on_update = on_update or (lambda progress: None)
        #: fixed facts shown in fuzzer_stats (e.g. the cluster run, for `mallory cleanup RUN`)
        self.info = dict(info or {})
        if worker != LOCAL:  # one of several workers: its stats say which
            self.info["worker"] = worker
        created = directory.config()
        #: afl-whatsup's and afl-plot's title for the campaign, and the command that made it
        self.banner = f"{Path(created.sut).name} x{created.nodes}"
        self.command_line = shlex.join(created.command)
        #: told of every action taken, with its report (e.g. to put it in the timeline and history)
        self.on_action = on_action or (lambda action, report: None)
        #: predicates over windows that give schedules levels (None: no waypoints)
        self.waypoints = waypoints
        #: restarts dead components of the live stack (None: nothing to watch)
        self.watchdog = watchdog
        #: the protocol model windows are replayed through (None: no model)
        self.model = model
        self._families: list[str] = []  # the fault families in force, for waypoints and the learner
        counters = self.learner.counters()
        self.progress = restore_progress(directory, counters)
        self._policy = counters.policy  # the policy's name, as the learner side says

    def actions(self) -> list[str]:
        offered = [a for a in self.nemesis.actions() if a not in (HEAL, NOOP)]
        return [*offered, HEAL, NOOP]

    def run(self, schedules: int | None = None, duration_s: float | None = None, stop: Callable[[], bool] | None = None) -> Progress:
        """Run schedules until `schedules` more are done, `duration_s` of total campaign time
        has passed, or `stop()` says so (checked between steps)."""
        asked = stop or (lambda: False)

        def stop_now() -> bool:  # checked between steps too: a deadline cuts the schedule short
            return asked() or (duration_s is not None and self.progress.elapsed_s() >= duration_s)

        done = 0
        while (schedules is None or done < schedules) and not stop_now():
            self.run_schedule(self.progress.schedules_done, stop_now)
            done += 1
        return self.progress

    def run_schedule(
        self,
        index: int,
        stop: Callable[[], bool] = lambda: False,
        script: list[ScriptedStep] | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """One schedule. With `script` (a recorded schedule's steps, for replay and shrink)
        the actions are taken in that order instead of being chosen, and `seed` replaces the
        derived one, so the faults pick the same targets as they did."""
        cfg = self.config
        seed = schedule_seed(cfg.seed, index) if seed is None else seed
        # A policy that plans whole schedules (modelfuzz) gives the seed, draws and windows
        # too: a kept schedule played again must hit the same nodes.
        plan = None if script is not None else self.learner.plan(self.worker, self.actions(), cfg.steps, cfg.window_s,
                                                                   seed)
        if plan is not None:
            seed = plan.seed
        window_ns = int(cfg.window_s * 1e9)
        record: dict[str, Any] = {"index": index, "seed": seed, "started_ns": self.source.now_ns(), "steps": []}
        if plan is not None:
            record["plan"] = {"parent": plan.parent, "mutations": list(plan.mutations)}
        self.progress.schedule_running = True
        self._enter("fuzzing")
        if self.checker is not None:
            self.checker.begin_schedule(index)

        # Orient: where does the schedule start from? (Not from a window with a gap in it.)
        self._restart_model()
        gap = self._revive(record, "start")
        end = self.source.now_ns()
        with self._deaths_explained(record):
            first = self._feedback(end - window_ns, end)
        observable = first.complete and not gap
        model = self._replay(first, observable, gap)
        observed = self.learner.observe(self.worker, Transition(
            window=WindowSeen(first.summary, first.pairs, model=model) if observable else None,
            feedback_ms=self._feedback_ms(first), late=not first.complete))
        record["initial_state"] = observed.state_id
        if observed.state_id is not None:
            self.progress.current_state = observed.state_id
        self.progress.states, self.progress.pairs_covered = observed.states, observed.pairs_covered
        count_model(self.progress, observed.model)
        active: list[Any] = []
        self._families.clear()
        try:
            with self._deaths_explained(record):
                steps = len(script) if script is not None else len(plan.steps) if plan is not None else cfg.steps
                for step in range(steps):
                    if stop():
                        break
                    actions = self.actions()
                    fallback: str | None = None
                    decision_ms: float | None = None
                    if script is not None:
                        planned = script[step]
                    elif plan is not None:  # the plan's step: nothing to decide
                        planned = ScriptedStep(plan.steps[step].action, plan.steps[step].draw, plan.steps[step].window_s)
                    else:
                        planned, fallback, decision_ms = self._decide(step, actions)
                    window_s = cfg.window_s if planned.window_s is None else planned.window_s
                    entry = self._step(step, planned.action, step_rng(seed, planned.draw), int(window_s * 1e9), active,
                                       record, actions, fallback, decision_ms, chosen=script is None)
                    entry.update(draw=planned.draw, window_s=window_s)
                    record["steps"].append(entry)
        except ComponentDied:
            raise  # the schedule in flight is dropped: no record, no checkpoint (--resume redoes it)
        except BaseException:
            self._end_schedule(index, record, active)
            raise
        self._end_schedule(index, record, active)
        return record

    def _decide(self, step: int, actions: list[str]) -> tuple[ScriptedStep, str | None, float]:
        """Ask the learner side for the step's action, timing it; the step, how the action
        was chosen when the learner did not choose it (Decision.fallback), and how long the
        decision took (ms)."""
        asked = time.monotonic()
        decision = self.learner.decide(self.worker, actions)
        decision_ms = (time.monotonic() - asked) * 1e3
        self.progress.decision_ms.append(decision_ms)
        if decision.fallback is not None:
            self.progress.fallback_decisions += 1
        return ScriptedStep(decision.action, step), decision.fallback, decision_ms

    @contextmanager
    def _deaths_explained(self, record: dict[str, Any]) -> Iterator[None]:
        """A failure while a component lay dead (a call to a dead mediator) ends as that
        death (ComponentDied, from the watchdog), not as the failure it caused."""
        try:
            yield
        except ComponentDied:
            raise
        except Exception:
            self._revive(record, "failure", grace_s=FAILURE_GRACE_S)
            raise

    def _end_schedule(self, index: int, record: dict[str, Any], active: list[Any]) -> None:
        """Heal, reset, check and record the schedule, whatever ended its steps."""
        level = max((entry.get("waypoint") or 0 for entry in record["steps"]), default=0)
        if self.waypoints is not None and level:
            record["waypoint"] = self.waypoints.names[level - 1]
            reached = self.progress.waypoints_reached
            reached[record["waypoint"]] = reached.get(record["waypoint"], 0) + 1
        with self._deaths_explained(record):
            self._enter("healing")
            problems = self._heal_all(active)
            if problems:
                record["heal_problems"] = problems
            # A heal step that failed (a node not added back: no quorum) left its fault in
            # force, and only the reset heals it: the cluster is whole from then on, not now.
            unhealed = bool(problems) or any(entry.get("heal_problems") for entry in record["steps"])
            if not unhealed and self.checker is not None:
                self.checker.faults_healed()
            self.learner.end_schedule(self.worker)
            self.progress.current_fault = "reset"
            self._enter("resetting")
            record["reset"] = report_json(self.nemesis.reset())
            if unhealed and self.checker is not None:  # the reset healed what the heals could not
                self.checker.faults_healed()
        self.sleeper.sleep(self.config.reset_s)
        record["ended_ns"] = self.source.now_ns()
        self._revive(record, "reset")
        self._finish(index, record)

    def _revive(self, record: dict[str, Any], at: str | int, grace_s: float = 0.0) -> list[str]:
        """Ask the watchdog; components it restarted are a gap in the schedule's observation
        at `at` (a step number, "start", "reset"), noted in the record. ComponentDied passes."""
        revived = self.watchdog.revive_dead(grace_s) if self.watchdog is not None else []
        if revived:
            record.setdefault("unobserved", []).append({"at": at, "restarted": revived})
        return revived

    def _enter(self, phase: str) -> None:
        """Tell the status screen what the loop does now (it may take a while)."""
        self.progress.phase = phase
        self.on_update(self.progress)

    def _heal_all(self, active: list[Any]) -> list[str]:
        """Heal every active fault; empties `active`. A heal that cannot be done now (say,
        a membership change with no quorum) must not end the campaign: its problem is
        returned for the record, and the schedule's reset tries again."""
        problems = self.nemesis.heal_all(active)
        active.clear()
        self._families.clear()
        return problems

    def _end_of_window(self, action: str, report: Any, active: list[Any]) -> dict[str, Any]:
        """Heal a fault that lasts one window, its window observed; what the step's record
        says of it then (its report with the heal's evidence). A heal that cannot be done
        now leaves the fault active for the schedule's heal and reset, as a problem."""
        problems = self.nemesis.heal_all([report])
        if not problems:
            active.remove(report)
            self._families.remove(action.partition(":")[0])
        return {"report": report_json(report), "healed_after_window": not problems,
                **({"heal_problems": problems} if problems else {})}

    def _feedback(self, start_ns: int, end_ns: int) -> Window:
        asked = time.monotonic()
        window = self.source.window(start_ns, end_ns, self.config.feedback_timeout_s)
        if window.complete:
            self.progress.feedback_ms.append((time.monotonic() - asked) * 1e3)
        return window

    def _feedback_ms(self, window: Window) -> float | None:
        """The feedback latency `_feedback` just measured for `window` (None: it was late)."""
        return self.progress.feedback_ms[-1] if window.complete and self.progress.feedback_ms else None

    def _step(
        self, step: int, action: str, rng: random.Random, window_ns: int, active: list[Any], record: dict[str, Any],
        actions: list[str], fallback: str | None = None, decision_ms: float | None = None, chosen: bool = True,
    ) -> dict[str, Any]:
        self.progress.current_fault = action
        self.on_update(self.progress)
        t0 = self.source.now_ns()
        report = None
        refused = None
        heal_problems: list[str] = []
        if action == HEAL:
            heal_problems = self._heal_all(active)
        elif action != NOOP:
            try:
                report = self.nemesis.enact(action, rng)
                active.append(report)
                self._families.append(action.partition(":")[0])
                if self.model is not None:
                    self.model.noted(action, report_json(report))
            except MalloryError as exc:
                # A fault the cluster cannot take right now (e.g. its target is down) must not
                # end a day-long campaign: the step is recorded as refused, like a noop.
                refused = str(exc)
                self.progress.refused_faults += 1
        if refused is None:
            self.on_action(action, report)
        self.sleeper.sleep(max(0.0, (t0 + window_ns - self.source.now_ns()) / 1e9))
        gap = self._revive(record, step)
        t1 = max(self.source.now_ns(), t0 + window_ns)
        window = self._feedback(t0, t1)
        entry: dict[str, Any] = {
            "step": step,
            "action": action,
            "report": report_json(report),
            "refused": refused,
            **({"heal_problems": heal_problems} if heal_problems else {}),
            "window_ns": [t0, t1],
            "events": window.events,
            "late": not window.complete,
            **({"truncated": True} if window.truncated else {}),
            **({"unobserved": gap} if gap else {}),
            **({"fallback": fallback} if fallback else {}),
        }
        p = self.progress
        p.steps_done += 1
        waypoint = 0
        observable = window.complete and not gap  # a window with a gap teaches nothing
        if self.waypoints is not None and observable:
            waypoint = self.waypoints.level(window.types, self._families)
        model = self._replay(window, observable, gap)
        observed = self.learner.observe(self.worker, Transition(
            action=action, actions=tuple(actions), chosen=chosen,
            window=WindowSeen(window.summary, window.pairs, waypoint, tuple(self._families), model) if observable
            else None,
            feedback_ms=self._feedback_ms(window), decision_ms=decision_ms,
            fallback=fallback, late=not window.complete))
        if observed.state_id is not None:
            entry.update(state=observed.state_id, new=observed.is_new, reward=observed.reward,
                         summary_size=len(window.summary), pairs=len(window.pairs), new_pairs=observed.new_pairs,
                         waypoint=waypoint)
            if model is not None:
                entry.update(model_states=len(model.states), new_model_states=observed.new_model_states,
                             **({"model_mismatches": list(model.mismatches)} if model.mismatches else {}))
                if observed.new_model_states:
                    p.last_new_model_state_s = p.elapsed_s()
            p.current_state = observed.state_id
            p.deepest_waypoint = max(p.deepest_waypoint, waypoint)
            if observed.is_new:
                p.last_new_state_s = p.elapsed_s()
            if observed.new_pairs:
                p.last_new_pair_s = p.elapsed_s()
        else:  # late or unobserved: no state, no reward (see Learner.observe_window)
            if not window.complete:
                p.late_steps += 1
            entry.update(state=None, new=None, reward=None)
        if report is not None and self.nemesis.one_window(report):
            entry.update(self._end_of_window(action, report, active))
        p.states, p.pairs_covered = observed.states, observed.pairs_covered
        count_model(p, observed.model)
        self.dir.append_plot(plot_row(p, entry, self._feedback_ms(window), self.model is not None))
        self.dir.write_stats(self.stats())
        self.on_update(p)
        return entry

    def _replay(self, window: Window, observable: bool, gap: list[str]) -> ModelTrace | None:
        """The window through the model (None: no model, or nothing to learn from it). A
        late window's events come with the next complete one's trace (TimelineWindows); a
        gap lost events, and so did a trace the mediator cut (its beginning dropped by the
        buffer's bounds), so the model starts over from what it knows at the start."""
        if self.model is None:
            return None
        if gap:
            self._restart_model()
        if not observable:
            return None
        if window.trace_cut:  # the mediator dropped events of the trace: what the model knows is stale
            self.model.restart()
        return self.model.run(window.trace)

    def _restart_model(self) -> None:
        """A new execution of the model, fed from the next window on: the events before it
        (the last schedule's heal and reset, which restart nodes without a fault event the
        model knows) belong to no execution."""
        if self.model is not None:
            self.model.restart()
            self.source.restart_trace()

    def _finish(self, index: int, record: dict[str, Any]) -> None:
        p = self.progress
        self._enter("checking")
        findings = self.checker.check_schedule(index, record) if self.checker else []
        if record.get("unobserved"):  # not blamed on the faults: a dead component may have caused them
            record["unobserved_findings"] = [f.signature for f in findings]
            findings = []
        record["findings"] = [f.signature for f in findings]
        if _needs_restart(record) and not self.config.fresh_data:  # (a fresh start below does it)
            # The next schedule must start from a working cluster, not inherit a wedged one.
            self._enter("restarting every node")
            record["restart"] = report_json(self.nemesis.restart_all())
        for finding in findings:
            bug = BugReport(finding.signature, finding.report, record, finding.files, self.dir.config(), finding.sighting)
            if self.learner.report_bug(self.worker, bug):
                p.bugs += 1
                p.last_bug_s = p.elapsed_s()
        if self.config.fresh_data:
            # After the checks and bundles, which read the nodes' data: the next schedule
            # starts from empty data, not from all that this one and those before wrote.
            self._enter("starting every node afresh")
            record["fresh_start"] = report_json(self.nemesis.restart_all(fresh=True))
        # Order matters for resume: the schedule file marks the schedule done, so the
        # learner it trained is saved first.
        self.learner.schedule_done(self.worker, record)
        self.dir.write_schedule(index, record)
        p.schedules_done += 1
        p.schedule_running = False
        self.dir.write_stats(self.stats())
        self.on_update(p)

    def stats(self) -> dict[str, Any]:
        """fuzzer_stats: AFL++'s keys (afl.py), then Mallory's own (times in campaign
        seconds), then `info`."""
        return campaign_stats(self.progress, self.banner, self.command_line, self._policy, self.info,
                              self.model is not None)


def restore_progress(directory: CampaignDir, counters: Counters) -> Progress:
    """The counters of a campaign resumed from `directory` (a new one's are zeros): its
    schedule records, its fuzzer_stats' run time, and the learner side's totals."""
    p = Progress()
    for record in directory.read_schedules():
        p.schedules_done += 1
        p.steps_done += len(record.get("steps", []))
        p.late_steps += sum(1 for s in record.get("steps", []) if s.get("late"))
        p.deepest_waypoint = max([p.deepest_waypoint, *(s.get("waypoint") or 0 for s in record.get("steps", []))])
        reached = record.get("waypoint")
        if reached:
            p.waypoints_reached[reached] = p.waypoints_reached.get(reached, 0) + 1
    p.states, p.pairs_covered, p.bugs = counters.states, counters.pairs_covered, counters.bugs
    count_model(p, counters.model)
    try:
        p.elapsed_before_s = float(directory.read_stats().get("run_time", 0))
    except ValueError:
        p.elapsed_before_s = 0.0
    return p


def count_model(p: Progress, totals: ModelTotals) -> None:
    """The learner side's model coverage into the counters."""
    p.model_states, p.model_transitions, p.model_mismatches = totals.states, totals.transitions, totals.mismatches


def campaign_stats(p: Progress, banner: str, command_line: str, policy: str, info: dict[str, Any],
                   model: bool = False) -> dict[str, Any]:
    """fuzzer_stats of a campaign whose counters are `p` (a worker's, or the merged ones of
    several: hub.py); `model`: whether it has a protocol model (its counters then)."""
    return {
        **afl_stats(p, banner, command_line),
        "schedules_done": p.schedules_done,
        "steps_done": p.steps_done,
        "late_steps": p.late_steps,
        "refused_faults": p.refused_faults,
        "distinct_states": p.states,
        "last_new_state": "-" if p.last_new_state_s is None else round(p.last_new_state_s, 1),
        "pairs_covered": p.pairs_covered,
        "last_new_pair": "-" if p.last_new_pair_s is None else round(p.last_new_pair_s, 1),
        **({"model_states": p.model_states, "model_transitions": p.model_transitions,
            "model_mismatches": p.model_mismatches,
            "last_new_model_state": "-" if p.last_new_model_state_s is None else round(p.last_new_model_state_s, 1)}
           if model else {}),
        "waypoints_reached": ",".join(f"{name}:{n}" for name, n in p.waypoints_reached.items()) or "-",
        "states_per_hour": round(p.states / max(p.elapsed_s(), 1e-9) * 3600, 1),
        "bugs_found": p.bugs,
        "last_bug": "-" if p.last_bug_s is None else round(p.last_bug_s, 1),
        "current_fault": p.current_fault,
        "feedback_ms_p50": p.feedback_percentile(0.5),
        "feedback_ms_p99": p.feedback_percentile(0.99),
        "decision_ms_p50": p.decision_percentile(0.5),
        "decision_ms_p99": p.decision_percentile(0.99),
        "fallback_decisions": p.fallback_decisions,
        "policy": policy,
        **info,
    }


def plot_row(p: Progress, entry: dict[str, Any], feedback_ms: float | None, model: bool = False) -> dict[str, Any]:
    """plot_data's line for a step just taken (`entry`: its record), by column name;
    `model`: whether the campaign has a protocol model (model_states is empty otherwise)."""
    return {
        **afl_plot_values(p),
        "schedules_done": p.schedules_done,
        "steps_done": p.steps_done,
        "late_steps": p.late_steps,
        "action": entry["action"],
        "state": entry["state"] if entry["state"] is not None else "",
        "new_state": int(bool(entry["new"])),
        "feedback_ms": round(feedback_ms, 1) if feedback_ms is not None else "",
        "waypoint": entry.get("waypoint", 0) if entry["state"] is not None else 0,
        "model_states": p.model_states if model else "",
    }


def _needs_restart(record: dict[str, Any]) -> bool:
    """A reset that reported problems, or a schedule whose workload got not one op through."""
    reset = record.get("reset")
    unhealthy = isinstance(reset, dict) and reset.get("healthy") is False
    return unhealthy or (record.get("checks") or {}).get("served") == 0
