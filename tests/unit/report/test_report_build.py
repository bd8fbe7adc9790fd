"""The whole report build, without root: a campaign directory written through CampaignDir
(the campaign's own writer) around a synthetic event recording, with one bug bundle."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.errors import MalloryError
from mallory.report.build import ReportOptions, build_report
from mallory.report.campaign_data import BugInfo
from mallory.report.timeline_view import head_by_time
from mallory.timeline.codec import write_records
from mallory.timeline.synthetic import synthetic_stream
from tests.unit.report.report_checks import (
    assert_png,
    assert_self_contained,
    plot_rows,
    series_named,
)
from tests.unit.report.timeline_checks import (
    assert_view_matches,
    committed,
    parse_shiviz,
)

STREAM = dict(n_events=3000, n_nodes=3, packet_share=0.4, events_per_s=500, seed=4)


def make_campaign(root: Path, policy: str, states: list[int]) -> tuple[Path, list]:
    d = CampaignDir(root)
    d.create(CampaignConfig(policy=policy, seed=1, nodes=3, sut="none", steps=3, window_s=1.0, reset_s=1.0))
    (root / "events").mkdir()
    with open(root / "events" / "events.jsonl", "wb") as f:
        write_records(f, synthetic_stream(**STREAM))
    entries = committed(synthetic_stream(**STREAM))
    t0 = min(e.real_ns for e in entries)
    second = 1_000_000_000
    steps = [{"step": i, "action": a, "report": {"nodes": ["n2"], "started_ns": t0 + i * second} if a != "heal" else None,
              "refused": None, "window_ns": [t0 + i * second, t0 + i * second + 900_000_000], "late": False,
              "state": i, "new": True, "reward": 0.0}
             for i, a in enumerate(["partition:one", "pause:one", "heal"])]
    schedule = {"index": 0, "seed": 1, "started_ns": t0, "steps": steps, "ended_ns": t0 + 4 * second}
    for i, n in enumerate(states):
        d.append_plot({"relative_time_s": 1.5 * (i + 1), "schedules_done": 0, "steps_done": i + 1, "distinct_states": n,
                       "bugs": 0, "late_steps": 0, "action": steps[i % 3]["action"], "state": i, "new_state": 1,
                       "feedback_ms": 90 + i})
    d.write_stats({"start_time": t0 // 10**9, "run_time": 1.5 * len(states), "distinct_states": states[-1]})
    d.write_schedule(0, schedule)
    run = d.run_dir(0)
    (run / "logs").mkdir()
    (run / "logs" / "n2-sut.log").write_text("assertion failed: two leaders in term 3\n")
    d.record_bug("log-assertion-0123456789ab", {"oracle": "log", "kind": "assertion", "node": "n2",
                                                "message": "assertion failed: two leaders in term 3", "details": {"line": 1}},
                 schedule, [run], d.config())
    return root, entries


def test_report_build_end_to_end(tmp_path):
    root, entries = make_campaign(tmp_path / "c", "qlearning", [2, 3, 5, 5])
    index = build_report([root], ReportOptions(max_events=100))
    assert index == root / "report" / "index.html"
    page = assert_self_contained(index)
    states = page.images()[0]
    assert_png(states)
    rows = plot_rows(root)
    assert series_named(states, "c")["y"] == [0.0, *(float(r[3]) for r in rows)]
    bug_page = root / "report" / "bugs" / "log-assertion-0123456789ab.html"
    bug = assert_self_contained(bug_page)
    text = bug_page.read_text()
    assert "two leaders in term 3" in text and "partition:one" in text
    assert any(a.get("href", "").endswith("n2-sut.log") for t, a in bug.tags if t == "a")
    drawn = re.findall(r'<details class="section" data-start-ns="(\d+)"[^>]*>.*?<summary>(.*?)</summary>(.*?)</details>', text, re.S)
    assert [title.split(" (")[0] for _, title, _ in drawn] == ["step 0: partition:one", "step 1: pause:one", "step 2: heal", "reset"]
    bounds = [int(start) for start, _, _ in drawn] + [min(e.real_ns for e in entries) + 4_000_000_000]
    for (_, _, inner), start, end in zip(drawn, bounds, bounds[1:]):
        expected = head_by_time([e for e in entries if start <= e.real_ns < end], 100)
        assert expected, "the synthetic stream spans every section"
        assert_view_matches(inner[inner.index("<svg"):inner.index("</svg>") + 6], expected)
    _, _, events = parse_shiviz((root / "report" / "bugs" / "log-assertion-0123456789ab.shiviz").read_text())
    assert len(events) == sum(min(e.real_ns for e in entries) <= e.real_ns < bounds[-1] for e in entries)


def test_overlay_of_two_synthetic_campaigns(tmp_path):
    a, _ = make_campaign(tmp_path / "a", "qlearning", [2, 4, 6, 8])
    b, _ = make_campaign(tmp_path / "b", "random", [1, 2, 3, 3])
    index = build_report([a, b], ReportOptions(out=tmp_path / "cmp"))
    page = assert_self_contained(index)
    text = index.read_text()
    # Â12(qlearning, random) over one campaign each: 8 > 3
    assert re.search(r"<td>qlearning</td><td>random</td><td>1</td><td>large</td>", text), text[:3000]
    overlay = page.images()[0]
    assert series_named(overlay, "qlearning (n=1)")["y"][-1] == 8.0
    assert series_named(overlay, "random (n=1)")["y"][-1] == 3.0
    assert (tmp_path / "cmp" / "bugs" / "c1-log-assertion-0123456789ab.html").exists()
    assert (tmp_path / "cmp" / "bugs" / "c2-log-assertion-0123456789ab.html").exists()


def test_not_a_campaign_is_a_clear_error(tmp_path):
    with pytest.raises(MalloryError, match="no campaign"):
        build_report([tmp_path], ReportOptions())


def test_bug_first_and_last_seen_skip_sightings_without_a_time(tmp_path):
    sightings = [{"schedule": 3, "time": 50.0}, {"schedule": 1, "time": 20}, {"schedule": 2}, {"time": "x"}]
    bug = BugInfo("sig", tmp_path, {}, {}, sightings)
    assert (bug.first_seen, bug.last_seen, bug.count) == (20, 50.0, 4)
    untimed = BugInfo("sig", tmp_path, {}, {}, [{"schedule": 0}])
    assert untimed.first_seen is None and untimed.last_seen is None
