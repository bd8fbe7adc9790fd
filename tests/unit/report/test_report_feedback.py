"""What the report says of a campaign's feedback: pairs covered beside distinct states, the
comparison of groups with Â12 and Mann–Whitney p-values, the calibration and the waypoints;
and that a campaign written before these existed still renders, saying what it lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mallory.campaign.config import Calibration, CampaignConfig
from mallory.errors import MalloryError
from mallory.report.build import ReportOptions, build_report
from mallory.report.campaign_data import parse_waypoints_reached
from mallory.report.pages import calibration_rows
from mallory.report.plots import read_series
from tests.unit.report.campaigns import make_campaign
from tests.unit.report.report_checks import (
    Page,
    assert_png,
    assert_self_contained,
    series_named,
    summaries,
    table_headed,
)

WAYPOINTS = """
[[waypoint]]
name = "shallow"
faults = ["partition"]

[[waypoint]]
name = "middle"
events = ["became-leader"]

[[waypoint]]
name = "deep"
events = ["truncate"]
"""


def alt_texts(page: Page) -> list[str]:
    return [a["alt"] for t, a in page.tags if t == "img"]


def test_one_campaign_shows_pairs_beside_states_its_calibration_and_waypoints(tmp_path):
    waypoints = tmp_path / "waypoints.toml"
    waypoints.write_text(WAYPOINTS)
    calibration = Calibration(windows=20, threshold=0.7, largest=0.81, steady_states=2)
    root, _ = make_campaign(
        tmp_path / "c", "qlearning", [2, 3, 5, 5], pairs=[4, 9, 9, 12],
        stats={"schedules_done": 7, "last_new_pair": 6.0, "waypoints_reached": "deep:2,shallow:3"},
        waypoints=str(waypoints), calibration=calibration, abstraction="event-history")
    index = build_report([root], ReportOptions())
    page = assert_self_contained(index)
    text = index.read_text()
    assert alt_texts(page)[:3] == ["distinct states over time", "pairs covered over time", "new states per hour"]
    assert '<div class="side-by-side"><img class="plot" alt="distinct states over time"' in text
    pairs = page.images()[1]
    assert_png(pairs)
    assert series_named(pairs, "c")["y"] == [0.0, 4.0, 9.0, 9.0, 12.0]
    (summary,) = summaries(text)
    assert summary["pairs covered"] == "12 (last new at 6.0 s)"
    assert summary["state abstraction"] == "event-history"
    assert summary["similarity threshold"].startswith("0.7 (calibrated")
    assert summary["calibration"] == ("20 fault-free windows in 2 steady state(s); "
                                      "largest threshold under which 90% of them coincide: 0.81")
    assert summary["waypoints"] == str(waypoints)
    assert "<h3>Waypoints (7 schedules)</h3>" in text
    # in the file's order, the one never reached at 0, the schedules that reached none last
    assert table_headed(text, "waypoint", "schedules") == [
        ["shallow", "3", "43%"], ["middle", "0", "0%"], ["deep", "2", "29%"], ["(none reached)", "2", "29%"]]

    waypoints.unlink()  # the report read elsewhere than where the campaign ran
    text = build_report([root], ReportOptions()).read_text()
    assert "cannot read waypoints" in text
    assert table_headed(text, "waypoint", "schedules") == [
        ["deep", "2", "29%"], ["shallow", "3", "43%"], ["(none reached)", "2", "29%"]]


def test_waypoints_reached_is_read_by_the_last_colon_of_each_item():
    assert parse_waypoints_reached("leader:cut-off:2,deep:0") == {"leader:cut-off": 2, "deep": 0}
    assert parse_waypoints_reached("-") == {} == parse_waypoints_reached("")
    with pytest.raises(MalloryError, match="'deep' is not name:count"):
        parse_waypoints_reached("shallow:1,deep")


def test_the_threshold_says_whether_a_calibration_chose_it():
    assert dict(calibration_rows(CampaignConfig(sut="none", calibrate=0, threshold=0.6))) == {
        "similarity threshold": "0.6 (threshold from the configuration)", "calibration": "not calibrated"}
    asked = dict(calibration_rows(CampaignConfig(sut="none", calibrate=20)))  # stopped before it ended
    assert asked["calibration"] == "not calibrated (20 fault-free windows asked for, none recorded)"
    older = dict(calibration_rows(CampaignConfig(sut="none", threshold=0.55, calibration=Calibration(12, 0.55))))
    assert older == {"similarity threshold": "0.55 (calibrated: the lower of the configured one and the largest)",
                     "calibration": "12 fault-free windows (steady states not recorded); largest threshold under "
                                    "which 90% of them coincide: not recorded"}


def test_comparison_gives_each_group_its_mean_and_range_and_p_values_against_random(tmp_path):
    """Three campaigns a group: Q-learning steps every 1.5 s, random every 1 s, so by the
    common horizon (6 s) Q-learning did 4 steps and random 6."""
    runs = []
    for k, (final, pairs) in enumerate(zip([8, 9, 10], [20, 30, 40])):
        runs.append(make_campaign(tmp_path / f"q{k}", "qlearning", [2, 4, 6, final], pairs=[1, 2, 3, pairs])[0])
    for k, (final, pairs) in enumerate(zip([3, 4, 5], [25, 35, 15])):
        runs.append(make_campaign(tmp_path / f"r{k}", "random", [1, 2, 3, final, final, final],
                                  pairs=[1, 2, 3, 4, 5, pairs], step_s=1.0)[0])
    index = build_report(runs, ReportOptions(out=tmp_path / "cmp"))
    page = assert_self_contained(index)
    text = index.read_text()
    assert table_headed(text, "group") == [
        ["qlearning", "3", "4 ± 0 (4–4)", "9 ± 1 (8–10)", "30 ± 10 (20–40)"],
        ["random", "3", "6 ± 0 (6–6)", "4 ± 1 (3–5)", "25 ± 10 (15–35)"],
    ]
    # states: every Q-learning run above every random one, U = 9 of 9: exact p = 1 / C(6, 3);
    # pairs: 20 > 15, 30 > 25, 15, 40 > all: U = 6, P(U >= 6) = 7 / 20
    assert table_headed(text, "measure") == [
        ["distinct states", "qlearning", "random", "1", "large", "0.05"],
        ["pairs covered", "qlearning", "random", "0.6667", "medium", "0.35"],
    ]
    states, pairs = page.images()[:2]
    assert series_named(states, "qlearning (n=3)")["y"][-1] == 9.0
    assert series_named(pairs, "qlearning (n=3)")["y"][-1] == 30.0
    assert series_named(pairs, "random (n=3)")["y"][-1] == 25.0
    assert alt_texts(page)[:4] == ["distinct states by group", "pairs covered by group",
                                   "distinct states over time", "pairs covered over time"]


def write_old_campaign(root: Path, policy: str, states: list[int]) -> Path:
    """A campaign directory as mallory wrote it before event-pair coverage, calibration
    records, presets and waypoints: campaign.json without those keys, plot_data of ten
    columns, fuzzer_stats without pairs."""
    (root / "schedules").mkdir(parents=True)
    (root / "bugs").mkdir()
    (root / "campaign.json").write_text(json.dumps({
        "version": "0.1.0", "sut": "none", "policy": policy, "reward": "paper", "seed": 3, "nodes": 3,
        "workload": "list-append", "steps": 12, "window_s": 2.5, "reset_s": 5.0,
        "abstraction": "event-history", "threshold": 0.7, "backend": "netns"}))
    lines = [f"{2.5 * (i + 1)}, 0, {i + 1}, {n}, 0, 0, kill:one, {i}, 1, 95.0" for i, n in enumerate(states)]
    (root / "plot_data").write_text("# relative_time_s, schedules_done, steps_done, distinct_states, bugs, "
                                    "late_steps, action, state, new_state, feedback_ms\n" + "\n".join(lines) + "\n")
    (root / "fuzzer_stats").write_text(f"start_time          : 1700000000\nrun_time            : {2.5 * len(states)}\n"
                                       f"distinct_states     : {states[-1]}\nschedules_done      : 0\n")
    return root


def test_an_old_campaign_renders_saying_what_it_did_not_record(tmp_path):
    root = write_old_campaign(tmp_path / "old", "qlearning", [1, 3, 4])
    index = build_report([root], ReportOptions())
    page = assert_self_contained(index)
    text = index.read_text()
    assert "pairs covered over time" not in alt_texts(page)
    assert alt_texts(page)[:2] == ["distinct states over time", "new states per hour"]
    assert "this campaign&#x27;s plot_data does not record them (it predates event-pair coverage)" in text
    (summary,) = summaries(text)
    assert summary["pairs covered"] == "n/a: the campaign predates event-pair coverage"
    assert summary["calibration"] == "not calibrated"
    assert summary["similarity threshold"] == "0.7 (threshold from the configuration)"
    assert summary["waypoints"] == "none" and "Waypoints (" not in text


def test_an_old_campaign_among_new_ones_is_left_out_of_the_pairs_comparison(tmp_path):
    old = write_old_campaign(tmp_path / "old", "random", [1, 2, 3])
    new, _ = make_campaign(tmp_path / "new", "qlearning", [2, 4, 6, 8], pairs=[3, 5, 7, 9], step_s=1.875)
    index = build_report([new, old], ReportOptions(out=tmp_path / "cmp"))
    page = assert_self_contained(index)
    text = index.read_text()
    (qlearning, random) = table_headed(text, "group")
    assert qlearning[:2] == ["qlearning", "1"] and qlearning[-1] == "9 ± 0 (9–9)"
    assert random[:2] == ["random", "1"] and random[-1] == "n/a"
    # one group has pairs: nothing to contrast them with
    assert [row[0] for row in table_headed(text, "measure")] == ["distinct states"]
    pairs = page.images()[1]
    assert [s["label"] for s in read_series(pairs) if not s["label"].startswith("_")] == ["qlearning (n=1)"]
