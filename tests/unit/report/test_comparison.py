"""Groups of campaigns: their labels from campaign.json, and which groups are contrasted."""

from __future__ import annotations

import pytest

from mallory.campaign.config import PRESETS, CampaignConfig
from mallory.report.campaign_data import parse_plot_data
from mallory.report.comparison import compare, contrasts, group_label
from mallory.report.series import STATES, GroupCurve
from mallory.report.stats import mann_whitney_greater, vargha_delaney_a12


@pytest.mark.parametrize("settings, label", [
    ({}, "qlearning"),
    ({"policy": "random"}, "random"),
    ({"reward": "pairs"}, "qlearning/pairs"),
    ({"preset": "paper"}, "paper"),
    ({"preset": "paper", "reward": "novelty"}, "paper/novelty"),
    ({"preset": "paper", "policy": "epsilon-greedy"}, "paper(epsilon-greedy)"),
    ({"policy": "bonus-max", "waypoints": "/w.toml"}, "bonus-max+waypoints"),
    ({"policy": "bonus-max", "reward": "none", "waypoints": "/w.toml"}, "bonus-max/none+waypoints"),
    ({"reward": "paper", "context": "state"}, "qlearning/paper@state"),
    ({"policy": "random", "reward": "paper", "context": "state"}, "random"),
])
def test_group_label_names_policy_preset_reward_and_waypoints(settings, label):
    """Configurations as `mallory fuzz` makes them: a preset's values, then the options."""
    preset = PRESETS.get(settings.get("preset", ""), {})
    assert group_label(CampaignConfig(sut="none", **{**preset, **settings})) == label


def curve(group: str, final: list[int]) -> GroupCurve:
    return GroupCurve(group, len(final), [0.0], [0.0], [0.0], [0.0], final)


def test_without_random_every_ordered_pair_is_contrasted_both_ways():
    a, b, c = curve("qlearning", [5, 6, 7]), curve("qlearning/pairs", [4, 6, 9]), curve("paper", [1, 2])
    found = contrasts([a, b, c])
    assert [(x.a, x.b) for x in found] == [("qlearning", "qlearning/pairs"), ("qlearning", "paper"),
                                           ("qlearning/pairs", "qlearning"), ("qlearning/pairs", "paper"),
                                           ("paper", "qlearning"), ("paper", "qlearning/pairs")]
    first = found[0]
    assert first.a12 == vargha_delaney_a12([5, 6, 7], [4, 6, 9])
    assert first.p_greater == mann_whitney_greater([5, 6, 7], [4, 6, 9])


def test_with_random_each_group_is_contrasted_with_it_alone():
    found = contrasts([curve("qlearning", [5]), curve("random", [3]), curve("paper", [2])])
    assert [(x.a, x.b, x.a12) for x in found] == [("qlearning", "random", 1.0), ("paper", "random", 0.0)]


def test_pairs_compare_only_the_campaigns_that_recorded_them():
    before_pairs = "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, new_state, feedback_ms\n"
    with_pairs = before_pairs.rstrip("\n") + ", pairs_covered, waypoint\n"
    new = parse_plot_data(with_pairs +
                          "10, 0, 1, 4, 0, 0, a, 1, 1, 1, 7, 0\n20, 0, 2, 6, 0, 0, a, 1, 1, 1, 9, 1\n")
    old = parse_plot_data(before_pairs + "10, 0, 1, 2, 0, 0, a, 1, 1, 1\n30, 0, 3, 3, 0, 0, a, 1, 1, 1\n")
    compared = compare({"qlearning": [new, old], "random": [old]}, points=3)
    assert compared.horizon_s == 20.0
    assert compared.campaigns == {"qlearning": 2, "random": 1}
    assert [(c.group, c.runs, c.final) for c in compared.pairs.curves] == [("qlearning", 1, [9])]
    assert compared.pairs.contrasts == []
    assert [(c.group, c.final) for c in compared.states.curves] == [("qlearning", [6, 2]), ("random", [2])]
    assert [(c.group, c.final) for c in compared.steps.curves] == [("qlearning", [2, 1]), ("random", [1])]
    assert compared.states.metric is STATES
    assert compare({"random": [[]]}) is None
