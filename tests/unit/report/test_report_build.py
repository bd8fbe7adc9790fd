"""The whole report build, without root, on campaign directories made by hand (campaigns.py):
plots, bug pages, timelines, the overlay of two campaigns."""

from __future__ import annotations

import re

import pytest

from mallory.errors import MalloryError
from mallory.report.build import ReportOptions, build_report
from mallory.report.campaign_data import BugInfo
from mallory.report.timeline_view import head_by_time
from tests.unit.report.campaigns import make_campaign
from tests.unit.report.report_checks import (
    assert_png,
    assert_self_contained,
    plot_rows,
    series_named,
)
from tests.unit.report.timeline_checks import assert_view_matches, parse_shiviz


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


def test_a_crash_bug_page_shows_the_backtrace_and_the_last_log_lines(tmp_path):
    from mallory.campaign.directory import CampaignDir

    root, _ = make_campaign(tmp_path / "c", "random", [1, 2])
    d = CampaignDir(root)
    details = {"signal": 11, "last_line": "applying entry 42",
               "last_log_lines": ["snapshot taken: 8 keys", "applying entry 42"],
               "backtrace": [{"address": "0x7f00", "module": "/lib/libc.so.6", "offset": "0x3c050", "symbol": None},
                             {"address": "0x5500", "module": "/opt/raft-kv", "offset": "0x1169", "symbol": None,
                              "where": "fsm_apply at raft_kv.c:312"}]}
    report = {"oracle": "signal", "kind": "killed-by-SIGSEGV", "node": "n2", "message": "process died by SIGSEGV",
              "details": details}
    d.record_bug("signal-killed-by-sigsegv-0123456789ab", report, d.read_schedules()[0], [], d.config())
    build_report([root], ReportOptions(max_events=50))
    text = (root / "report" / "bugs" / "signal-killed-by-sigsegv-0123456789ab.html").read_text()
    assert "Backtrace of n2" in text and "<td>fsm_apply at raft_kv.c:312</td><td>/opt/raft-kv+0x1169</td>" in text
    assert "The last 2 lines n2 logged" in text and "snapshot taken: 8 keys\napplying entry 42" in text


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
