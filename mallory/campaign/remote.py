"""A worker's side of a shared learner: the `LearnerService` a worker's loop talks to when
the learner (a `LearnerHub`, hub.py) lives in another process, maybe on another machine.

The calls go through a `HubLink` (ray_engine.py's reaches a Ray actor; the unit tests' fakes
call a hub in-process), each with a deadline. Which deadline is the protocol's one choice:

- `decide` has the step's latency budget (`budget_s`, by default a tenth of the window):
  a decision that comes later would delay the fault, and so shift the window the learner
  learns from. When the hub does not answer within it (busy with another worker's
  checkpoint, restarting after a death, unreachable), the worker decides itself from its
  copy of the policy (`snapshot`, refreshed after every schedule) at the position the hub
  last told it (`Observation.policy_state`; a policy that reads no position, such as a
  fault sampler's, needs none), or at random when it has neither. The step
  records how (`fallback`), and the next `observe` tells the hub which action was taken,
  so the transition is learnt as it happened (`Learner.take`).
- everything else waits `call_timeout_s` (seconds, not milliseconds): `observe` comes after
  the window, where the loop waits for the timeline anyway; a schedule's plan, bug reports
  and the schedule's end come between schedules. A call that fails there costs that call's lesson, never the
  worker: an observation then teaches nothing, and a bug that cannot be reported is kept in
  the worker's own directory (its bundle and sightings there), so nothing found is lost.

Every decision's round trip is timed by the loop (`decision_ms`), whoever answered.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from mallory.campaign.directory import CampaignDir
from mallory.campaign.service import (
    BugReport,
    Counters,
    Decision,
    Observation,
    Transition,
    pack_files,
)
from mallory.errors import MalloryError
from mallory.learner.corpus import Plan
from mallory.learner.policies import Policy, policy_from_state

log = logging.getLogger(__name__)

#: the share of a step's window a decision may take before the worker decides itself
BUDGET_SHARE = 0.1


class LearnerUnreachable(MalloryError):
    """The hub did not answer a call in time, or could not take it (dead, restarting)."""


class HubLink(Protocol):
    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        """`hub.method(*args)`'s answer, waited for at most `timeout_s`; LearnerUnreachable
        when there is none by then or the hub could not take the call. Calls made by one
        link reach the hub in the order they were made (a late answer still arrives there
        before the next call)."""
        ...


class RemoteLearner:
    def __init__(self, link: HubLink, local: CampaignDir, *, budget_s: float, call_timeout_s: float = 30.0,
                 seed: int = 0) -> None:
        """`local`: the worker's own campaign directory (where unreported bugs stay);
        `seed`: of the random choice made without policy or position."""
        self.link = link
        self.local = local
        self.budget_s = budget_s
        self.call_timeout_s = call_timeout_s
        self.rng = random.Random(seed)
        #: the copy of the policy to decide from without the hub (None: none yet)
        self.policy: Policy | None = None
        #: where the hub last placed the worker, as the policy knows it
        self.policy_state: int | None = None
        self._counters = Counters(0, 0, 0, "-")

    def counters(self) -> Counters:
        try:
            self._counters = self.link.call("counters", timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not give its counters (%s); counting from the last known", exc)
        self.refresh()
        return self._counters

    def plan(self, worker: str, actions: Sequence[str], steps: int, window_s: float, seed: int) -> Plan | None:
        """The hub's plan, or None when it does not answer in time: the schedule is then
        decided step by step, and nothing of it is kept in a corpus."""
        try:
            return self.link.call("plan", worker, list(actions), steps, window_s, seed, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not plan the schedule (%s): deciding step by step", exc)
            return None

    def decide(self, worker: str, actions: Sequence[str]) -> Decision:
        try:
            action = self.link.call("decide", worker, list(actions), timeout_s=self.budget_s)
        except LearnerUnreachable:
            action = None
        if action is not None:
            return Decision(action)
        if self.policy is not None and (self.policy_state is not None or not self.policy.reads_state):
            # (a policy that reads no state is given any: a sampler takes its fault wherever)
            position = 0 if self.policy_state is None else self.policy_state
            return Decision(self.policy.choose(position, list(actions)), "snapshot")
        return Decision(self.rng.choice(list(actions)), "random")

    def observe(self, worker: str, transition: Transition) -> Observation:
        try:
            observed = self.link.call("observe", worker, transition, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not take a window (%s): it teaches nothing", exc)
            return Observation(self._counters.states, self._counters.pairs_covered)
        if observed.policy_state is not None:
            self.policy_state = observed.policy_state
        self._counters = replace(self._counters, states=observed.states, pairs_covered=observed.pairs_covered)
        return observed

    def end_schedule(self, worker: str) -> None:
        self.policy_state = None
        try:
            self.link.call("end_schedule", worker, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not take the schedule's end (%s)", exc)

    def report_bug(self, worker: str, bug: BugReport) -> bool:
        """Ship the bug to the hub (its files only if no worker reported it before); kept
        in the worker's own directory when the hub cannot take it."""
        try:
            known = self.link.call("bug_known", bug.signature, timeout_s=self.call_timeout_s)
            archive = None if known else pack_files(bug.files)
            return self.link.call("report_bug", worker, replace(bug, files=[]), archive, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not take bug %s (%s): its bundle stays in %s", bug.signature, exc,
                        self.local.root / "bugs")
            known_here = self.local.known_bugs()
            bundle = self.local.record_bug(bug.signature, bug.report, bug.schedule, bug.files, bug.config,
                                           {**bug.sighting, "worker": worker, "unreported": True})
            return bundle.name not in known_here

    def schedule_done(self, worker: str, record: dict[str, Any]) -> None:
        try:
            self.link.call("schedule_done", worker, record, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not take schedule %s's end (%s): the merged records lack it",
                        record.get("index"), exc)
        self.refresh()

    def begin_schedule(self, worker: str) -> bool:
        """May this worker start another schedule? (Yes when the hub cannot say: the
        campaign's deadline still ends it.)"""
        try:
            return self.link.call("begin_schedule", worker, timeout_s=self.call_timeout_s)
        except LearnerUnreachable as exc:
            log.warning("the learner did not answer whether to go on (%s); going on", exc)
            return True

    def refresh(self) -> None:
        """Take a fresh copy of the policy (kept as it was when the hub cannot give one)."""
        try:
            self.policy = policy_from_state(self.link.call("snapshot", timeout_s=self.call_timeout_s))
        except LearnerUnreachable as exc:
            log.warning("no fresh copy of the policy (%s)", exc)
