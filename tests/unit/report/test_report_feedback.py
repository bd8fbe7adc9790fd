"""What the report says of a campaign's feedback: pairs covered beside distinct states, the
comparison of groups with Â12 and Mann–Whitney p-values; and that a campaign written
before these existed still renders, saying what it lacks."""

from __future__ import annotations

import json
from pathlib import Path

from mallory.report.build import ReportOptions, build_report
from mallory.report.plots import read_series
from tests.unit.report.campaigns import make_campaign
from tests.unit.report.report_checks import (
    Page,
    assert_png,
    assert_self_contained,
    series_named,
    table_headed,
)


def alt_texts(page: Page) -> list[str]:
    return [a["alt"] for t, a in page.tags if t == "img"]


def test_one_campaign_shows_pairs_covered_beside_distinct_states(tmp_path):
    root, _ = make_campaign(tmp_path / "c", "qlearning", [2, 3, 5, 5], pairs=[4, 9, 9, 12])
    index = build_report([root], ReportOptions())
    page = assert_self_contained(index)
    text = index.read_text()
    assert alt_texts(page)[:3] == ["distinct states over time", "pairs covered over time", "new states per hour"]
    assert '<div class="side-by-side"><img class="plot" alt="distinct states over time"' in text
    pairs = page.images()[1]
    assert_png(pairs)
    assert series_named(pairs, "c")["y"] == [0.0, 4.0, 9.0, 9.0, 12.0]


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
