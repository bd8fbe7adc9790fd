"""The counters of a running campaign: what the status screen, fuzzer_stats and plot_data
show (mallory/campaign/loop.py keeps them, afl.py names them the AFL way)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Progress:
    """Counters of the campaign so far; times are campaign seconds (across the incarnations
    of a resumed campaign) unless named otherwise."""

    #: when this incarnation started (Unix seconds)
    started: float = field(default_factory=time.time)
    elapsed_before_s: float = 0.0  # from earlier incarnations of a resumed campaign
    schedules_done: int = 0
    #: a schedule is under way (between its start and its record)
    schedule_running: bool = False
    steps_done: int = 0
    late_steps: int = 0
    refused_faults: int = 0
    states: int = 0
    #: the state the cluster was last seen in (None before the first complete window)
    current_state: int | None = None
    last_new_state_s: float | None = None
    #: distinct happens-before pairs of code/log events seen (the learner's coverage)
    pairs_covered: int = 0
    last_new_pair_s: float | None = None
    #: distinct states and transitions of the protocol model reached, steps it could not
    #: take (the learner's model coverage; 0 without a model)
    model_states: int = 0
    model_transitions: int = 0
    model_mismatches: int = 0
    last_new_model_state_s: float | None = None
    #: waypoint name -> schedules that reached it
    waypoints_reached: dict[str, int] = field(default_factory=dict)
    #: the deepest waypoint level any window reached (0: none)
    deepest_waypoint: int = 0
    bugs: int = 0
    last_bug_s: float | None = None
    current_fault: str = "-"
    #: what the loop is doing: taking a schedule's steps, healing, resetting, checking
    phase: str = "fuzzing"
    feedback_ms: list[float] = field(default_factory=list)
    #: how long each decision of the learner side took (a remote learner's round trip)
    decision_ms: list[float] = field(default_factory=list)
    #: decisions a worker made without the learner (it did not answer within the budget)
    fallback_decisions: int = 0

    def elapsed_s(self) -> float:
        return self.elapsed_before_s + time.time() - self.started

    def unix_time(self, campaign_s: float) -> float:
        """The Unix time of a moment given in campaign seconds."""
        return time.time() - self.elapsed_s() + campaign_s

    def feedback_percentile(self, p: float) -> float | None:
        return percentile(self.feedback_ms, p)

    def decision_percentile(self, p: float) -> float | None:
        return percentile(self.decision_ms, p, digits=2)


def percentile(values: list[float], p: float, digits: int = 1) -> float | None:
    """The `p` quantile (nearest rank) of the last 10 000 `values`, rounded; None if empty."""
    if not values:
        return None
    ordered = sorted(values[-10_000:])
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], digits)
