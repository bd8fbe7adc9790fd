"""`mallory report` and `mallory export --shiviz` on real short campaigns (as root):
the report of one directory and of two (overlay), self-contained; its plots are the data
of plot_data; bug pages draw the recorded timeline; ShiViz's regex reads the export."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from mallory.campaign.directory import PLOT_COLUMNS
from mallory.history.ops import pair_calls, read_history
from mallory.instrument.catalogue import Catalogue
from mallory.report.names import EventNamer
from mallory.report.plots import read_series
from mallory.report.recording import node_names, read_recording
from mallory.report.shiviz import SHIVIZ_REGEX
from mallory.report.sources import DEFAULT_MAX_EVENTS
from mallory.report.timeline_view import (
    head_by_time,
    schedule_sections,
    tail_by_time,
    timeline_svg,
)
from mallory.report.vclock import happened_before
from mallory.timeline.codec import read_records
from tests.unit.pictures.svg_checks import SVG
from tests.unit.report.report_checks import (
    assert_png,
    assert_self_contained,
    plot_rows,
    series_named,
)
from tests.unit.report.timeline_checks import (
    ancestors,
    assert_view_matches,
    committed,
    parse_shiviz,
    svg_elements,
)

#: plot_data's columns the checks read, by position
TIME, STATES, PAIRS, ACTION, FEEDBACK = (PLOT_COLUMNS.index(c) for c in
                                         ("relative_time", "corpus_count", "edges_found", "action", "feedback_ms"))


def mallory(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mallory.cli", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_report_of_one_campaign(qlearning_campaign):
    mallory("report", str(qlearning_campaign))
    index = qlearning_campaign / "report" / "index.html"
    page = assert_self_contained(index)
    text = index.read_text()
    assert "qlearning" in text
    bugs = [p for p in (qlearning_campaign / "bugs").iterdir() if p.is_dir()]
    assert f"Bugs ({len(bugs)})" in text and all(f"bugs/{b.name}.html" in text for b in bugs)
    images = page.images()
    assert len(images) == 6  # states, pairs, states per hour, fault mix, feedback, loss
    for png in images:
        assert_png(png)
    states, pairs, rate, mix, feedback, _loss = images
    rows = plot_rows(qlearning_campaign)
    assert len(rows) == 4, "one schedule of four steps"
    name = qlearning_campaign.resolve().name
    line = series_named(states, name)
    assert line["x"] == [0.0, *(float(r[TIME]) for r in rows)]
    assert line["y"] == [0.0, *(float(r[STATES]) for r in rows)]
    assert series_named(pairs, name)["y"] == [0.0, *(float(r[PAIRS]) for r in rows)]
    width = max(1.0, float(rows[-1][TIME]) / 12)  # the report's bins: about 12 over the campaign
    assert sum(series_named(rate, name)["y"]) * width / 3600 == pytest.approx(float(rows[-1][STATES]))
    families = {}
    for r in rows:
        families[r[ACTION].split(":")[0]] = families.get(r[ACTION].split(":")[0], 0) + 1
    bars = {s["label"]: sum(s["y"]) for s in read_series(mix) if s["kind"] == "bar"}
    assert bars == families
    timely = [(float(r[TIME]), float(r[FEEDBACK])) for r in rows if r[FEEDBACK]]
    fb = series_named(feedback, "feedback ms")
    assert list(zip(fb["x"], fb["y"])) == timely
    # the register workload's run: its latency plot beside results.edn, one dot per completed op
    run = qlearning_campaign / "runs" / "000000"
    _, ops = read_history(run / "history.edn")
    latency = ET.parse(run / "latency-raw.svg").getroot()
    drawn = sum(int(p.get("data-count")) for p in latency.iter(f"{SVG}path") if p.get("class") == "points")
    assert drawn == sum(c.done is not None for c in pair_calls(ops)) > 0


def test_report_of_two_campaigns_overlays_them_by_policy(qlearning_campaign, random_campaign, tmp_path):
    out = tmp_path / "cmp"
    mallory("report", str(qlearning_campaign), str(random_campaign), "--out", str(out))
    page = assert_self_contained(out / "index.html")
    text = (out / "index.html").read_text()
    assert "Comparison by policy" in text and "Vargha" in text
    overlay = page.images()[0]
    assert_png(overlay)
    q_rows, r_rows = plot_rows(qlearning_campaign), plot_rows(random_campaign)
    horizon = min(float(q_rows[-1][TIME]), float(r_rows[-1][TIME]))
    for label, rows in (("qlearning (n=1)", q_rows), ("random (n=1)", r_rows)):
        curve = series_named(overlay, label)
        assert curve["x"][-1] == pytest.approx(horizon)
        # one campaign per policy: the mean is that campaign's step function of plot_data
        for x, y in zip(curve["x"], curve["y"]):
            reached = [float(r[STATES]) for r in rows if float(r[TIME]) <= x]
            assert y == (reached[-1] if reached else 0.0)
    # both campaigns' own sections, each with its plots
    assert text.count("<h2 id=\"c") == 2


def test_bug_pages_draw_the_recorded_timeline_and_link_the_logs(bug_campaign):
    mallory("report", str(bug_campaign))
    report = bug_campaign / "report"
    index = assert_self_contained(report / "index.html")
    (bundle,) = [p for p in (bug_campaign / "bugs").iterdir() if p.is_dir()]
    links = [a["href"] for t, a in index.tags if t == "a" and a.get("href", "").startswith("bugs/")]
    assert links == [f"bugs/{bundle.name}.html"]
    bug_page = report / links[0]
    page = assert_self_contained(bug_page)
    text = bug_page.read_text()
    assert "assertion failed: resumed after a pause" in text, "the oracle's explanation"
    assert "pause:" in text, "the fault schedule"
    assert "<h2>Sightings</h2>" in text
    assert "The bundle holds no client history" in text, "a campaign without a workload has no latency plot"
    logs = [a["href"] for t, a in page.tags if t == "a" and a["href"].endswith(".log")]
    assert logs and all((bug_page.parent / href).is_file() for href in logs)

    import json

    schedule = json.loads((bundle / "schedule.json").read_text())
    recording = bug_campaign / "events" / "events.jsonl"
    with open(recording, "rb") as f:
        everything = committed(read_records(f), node_names(recording))
    sections = schedule_sections(schedule)
    assert len(sections) == len(schedule["steps"]) + 1, "one diagram per step and one for the reset"
    drawn = re.findall(r'<details class="section" data-start-ns="(\d+)"[^>]*>(.*?)</details>', text, re.S)
    assert [int(start) for start, _ in drawn] == [s.start_ns for s in sections]
    faults_seen = set()
    for section, (_, inner) in zip(sections, drawn):
        expected = head_by_time([e for e in everything if section.start_ns <= e.real_ns < section.end_ns], DEFAULT_MAX_EVENTS)
        if not expected:
            assert "<svg" not in inner
            continue
        svg = inner[inner.index("<svg"): inner.index("</svg>") + len("</svg>")]
        assert_view_matches(svg, expected)
        faults_seen |= {f["data-fault"].split()[0] for f in svg_elements(svg)[2]}
    covered = [e for e in everything if sections[0].start_ns <= e.real_ns < sections[-1].end_ns]
    assert covered and sum(sum(s.start_ns <= e.real_ns < s.end_ns for e in covered) for s in sections) == len(covered)
    enacted = {s["action"] for s in schedule["steps"] if s["action"] not in ("heal", "noop") and not s.get("refused")}
    assert faults_seen == enacted


def test_timeline_view_of_a_real_schedule_names_events_and_draws_every_message(qlearning_campaign, example_spec):
    import json

    schedule = json.loads((qlearning_campaign / "schedules" / "000000.json").read_text())
    span = (schedule["started_ns"], schedule["ended_ns"])
    recording = qlearning_campaign / "events" / "events.jsonl"
    (entries,) = read_recording([recording], [span]).spans
    with open(recording, "rb") as f:
        everything = committed(read_records(f), node_names(recording))
    expected = [e for e in everything if span[0] <= e.real_ns < span[1]]
    assert [(e.event, e.lamport) for e in entries] == [(e.event, e.lamport) for e in expected]
    assert sum(e.send is not None for e in expected) > 10, "a live Raft cluster exchanges messages"
    catalogue = Catalogue.load(str(example_spec.parent / "example-sut.mallory.json"))
    svg = timeline_svg(entries, EventNamer(catalogue))
    assert_view_matches(svg, expected)
    assert "replicate" in svg or "append-received" in svg, "code events are named by their annotation labels"
    assert "unknown:" not in svg


def test_shiviz_export_of_a_recording_matches_the_timeline(qlearning_campaign, tmp_path):
    out = tmp_path / "run.shiviz"
    recording = qlearning_campaign / "events" / "events.jsonl"
    mallory("export", "--shiviz", str(recording), "--max-events", "400", "--out", str(out))
    regex, delimiter, events = parse_shiviz(out.read_text())
    assert regex == SHIVIZ_REGEX == r"(?<event>.*)\n(?<host>\S*) (?<clock>{.*})" and delimiter == ""
    with open(recording, "rb") as f:
        expected = tail_by_time(committed(read_records(f), node_names(recording)), 400)
    assert len(events) == len(expected) and any(e.send is not None for e in expected)
    clocks = []
    for (text, host, clock), entry in zip(events, expected):
        assert host == entry.event.node and f"({host}#{entry.index} L{entry.lamport})" in text
        clocks.append(clock)
    before = ancestors(expected)
    for j in range(len(expected)):
        for i in range(len(expected)):
            if i != j:
                assert happened_before(clocks[i], clocks[j]) == bool(before[j] >> i & 1)


def test_shiviz_export_of_a_bundle(bug_campaign):
    import json

    (bundle,) = [p for p in (bug_campaign / "bugs").iterdir() if p.is_dir()]
    proc = mallory("export", "--shiviz", str(bundle))
    regex, _, events = parse_shiviz(proc.stdout)
    assert regex == SHIVIZ_REGEX
    assert any(text.startswith("FAULT fault pause:") for text, _, _ in events)
    # exactly the bundle's schedule span of the campaign's recording, in commit order
    schedule = json.loads((bundle / "schedule.json").read_text())
    recording = bug_campaign / "events" / "events.jsonl"
    with open(recording, "rb") as f:
        expected = [e for e in committed(read_records(f), node_names(recording))
                    if schedule["started_ns"] <= e.real_ns < schedule["ended_ns"]]
    assert [(host, f"({host}#{e.index} L{e.lamport})" in text) for (text, host, _), e in zip(events, expected)] == [
        (e.event.node, True) for e in expected]
    assert len(events) == len(expected)


def test_bad_input_is_a_clear_error(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "mallory.cli", "report", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode != 0 and "no campaign" in bad.stderr and "Traceback" not in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "mallory.cli", "export", "--shiviz", str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "no such event recording" in missing.stderr and "Traceback" not in missing.stderr
