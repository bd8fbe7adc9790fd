"""Several campaigns compared by group (pure): which group a campaign belongs to, and what
its group reached at the common horizon against the others.

A group is the campaigns run with the same learner settings (their seeds differ): the same
policy, preset, reward and use of waypoints. Groups are compared on distinct states and on
pairs covered at the common horizon, by Vargha–Delaney Â12 and the one-sided Mann–Whitney
p-value, and on the steps they did by then: a policy that decides slowly takes fewer steps
in the same time, which the per-time comparison alone would hide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mallory.campaign.config import PRESETS, CampaignConfig
from mallory.report.campaign_data import PlotRow
from mallory.report.series import (
    PAIRS,
    STATES,
    STEPS,
    GroupCurve,
    Metric,
    common_horizon,
    overlay,
)
from mallory.report.stats import mann_whitney_greater, vargha_delaney_a12

#: the group every other is compared against when a comparison has it
BASELINE = "random"


def group_label(config: CampaignConfig) -> str:
    """The name of a campaign's group: its preset if it had one ("paper"), else its policy;
    then "(policy)" if a preset's policy was overridden, "/reward" and "@context" if they
    are not the ones the name implies (the preset's, else the defaults; a random policy
    learns nothing, so neither applies to it), "+waypoints" if a waypoint file guided it.
    So "qlearning", "qlearning/paper@state", "paper", "bonus-max+waypoints"."""
    implied = {"policy": CampaignConfig.policy, "reward": CampaignConfig.reward, "context": CampaignConfig.context,
               **PRESETS.get(config.preset or "", {})}
    label = config.preset or config.policy
    if config.preset and config.policy != implied["policy"]:
        label += f"({config.policy})"
    if config.policy != "random":
        if config.reward != implied["reward"]:
            label += f"/{config.reward}"
        if config.context != implied["context"]:
            label += f"@{config.context}"
    if config.waypoints:
        label += "+waypoints"
    return label


@dataclass(frozen=True)
class Contrast:
    """Group A against group B on one metric at the common horizon."""

    a: str
    b: str
    #: the probability that a campaign of A reaches more than one of B (0.5: no difference)
    a12: float
    #: the one-sided Mann–Whitney p-value of "campaigns of A reach more than those of B"
    p_greater: float


def contrasts(curves: Sequence[GroupCurve], baseline: str = BASELINE) -> list[Contrast]:
    """Each group against `baseline` when one of the curves is that group, else every
    ordered pair of groups (both directions: the test is one-sided)."""
    if any(c.group == baseline for c in curves):
        (base,) = [c for c in curves if c.group == baseline]
        pairs = [(c, base) for c in curves if c is not base]
    else:
        pairs = [(a, b) for a in curves for b in curves if a is not b]
    return [Contrast(a.group, b.group, vargha_delaney_a12(a.final, b.final), mann_whitney_greater(a.final, b.final))
            for a, b in pairs]


@dataclass(frozen=True)
class MetricComparison:
    """The groups' curves of one metric and their contrasts at the horizon."""

    metric: Metric
    curves: list[GroupCurve]  # the groups with at least one campaign that recorded the metric
    contrasts: list[Contrast]

    def curve(self, group: str) -> GroupCurve | None:
        return next((c for c in self.curves if c.group == group), None)


@dataclass(frozen=True)
class Comparison:
    """Groups of campaigns at the common horizon: steps done, distinct states, pairs covered."""

    horizon_s: float
    #: group -> how many campaigns it has (with steps recorded), in the order groups first appear
    campaigns: dict[str, int]
    steps: MetricComparison
    states: MetricComparison
    pairs: MetricComparison


def compare(groups: Mapping[str, Sequence[Sequence[PlotRow]]], points: int = 200) -> Comparison | None:
    """The comparison of groups of campaigns (group -> each campaign's plot rows) up to the
    shortest campaign's duration; None if no campaign recorded a step."""
    horizon = common_horizon(rows for runs in groups.values() for rows in runs)
    if horizon is None:
        return None

    def on(metric: Metric) -> MetricComparison:
        curves = overlay(groups, metric, horizon, points)
        return MetricComparison(metric, curves, contrasts(curves))

    steps = MetricComparison(STEPS, overlay(groups, STEPS, horizon, points=1), [])  # compared by range only
    return Comparison(horizon, {c.group: c.runs for c in steps.curves}, steps, on(STATES), on(PAIRS))
