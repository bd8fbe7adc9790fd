"""Bug pages show the verdict: every anomaly of the history with each cycle drawn, the ops
around a linearizability failure, the sightings and what each saw, and the schedule's
latency with its faults shaded; every picture well-formed SVG that draws what it says."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import orjson

from mallory.history.ops import pair_calls, read_history
from mallory.report.build import ReportOptions, build_report
from tests.unit.oracles.txn_histories import concurrent
from tests.unit.pictures.histories import (
    failover_history,
    register_history,
    stale_read_history,
)
from tests.unit.pictures.svg_checks import SVG, cycle_parts, dots, elements
from tests.unit.report.campaigns import make_campaign
from tests.unit.report.report_checks import assert_self_contained


def pictures(page: str) -> dict[str, list[str]]:
    """The page's inline SVG pictures of verdicts by class (cycle, linear, latency), each
    checked to be well-formed."""
    found: dict[str, list[str]] = {}
    for svg in re.findall(r"<svg\b.*?</svg>", page, re.S):
        root = ET.fromstring(svg)
        if root.tag == f"{SVG}svg":
            found.setdefault(root.get("class"), []).append(svg)
    return found


def test_a_list_append_bug_page_draws_every_cycle_and_the_latency(tmp_path):
    root, _ = make_campaign(tmp_path / "c", "qlearning", [2, 3], workload="list-append",
                            histories=[failover_history(), concurrent("rx_ay1", "ry_ax1"), stale_read_history()])
    bundles = sorted(p.name for p in (root / "bugs").iterdir())
    assert len(bundles) == 3 and [b.split("-")[2:-1] for b in bundles if b.startswith("list-append")] == [
        ["not", "serializable"], ["not", "strict", "serializable"]]
    build_report([root], ReportOptions(max_events=50))
    assert_self_contained(root / "report" / "index.html")
    (lost,) = [b for b in bundles if "-not-serializable-" in b]
    page_path = root / "report" / "bugs" / f"{lost}.html"
    assert_self_contained(page_path)
    page = page_path.read_text()
    details = orjson.loads((root / "bugs" / lost / "report.json").read_bytes())["details"]
    assert re.findall(r'<details class="anomaly" data-anomaly="([^"]+)"', page) == list(details["anomalies"])
    drawn = pictures(page)
    cycles = [case["cycle"] for cases in details["anomalies"].values() for case in cases if "cycle" in case]
    assert len(drawn["cycle"]) == len(cycles) >= 3
    for svg, cycle in zip(drawn["cycle"], cycles):
        txns, deps = cycle_parts(svg)
        assert txns == [str(s["from"]) for s in cycle] and [d[1] for d in deps] == [s["rel"] for s in cycle]
    (latency,) = drawn["latency"]
    _, ops = read_history(root / "bugs" / lost / "000001" / "history.edn")
    points = {p.get("data-type"): dots(p) for p in elements(ET.fromstring(latency), "path", "points")}
    assert points == {t: sum(c.status == t for c in pair_calls(ops)) for t in ("ok", "info")}
    assert [r.get("data-fault") for r in elements(ET.fromstring(latency), "rect", "fault")] == ["kill:primaries"]
    # two schedules, two mixes, one bug: the sightings say what each saw
    sightings = re.search(r"<h2>Sightings</h2>.*?</table>", page, re.S).group(0)
    rows = re.findall(r"<tr><td>(\d+)</td>(?:<td>.*?</td>){3}<td>(.*?)</td></tr>", sightings)
    assert rows == [("1", ", ".join(details["anomaly_types"])), ("2", "G2-item")]
    index = (root / "report" / "index.html").read_text()
    assert re.search(rf'{lost}</a></td><td>list-append/not-serializable</td><td>list-append history not serializable: '
                     rf'[^<]*incompatible-order</td>.*?<td>2</td></tr>', index)


def test_a_register_bug_page_draws_the_ops_around_the_failure(tmp_path):
    root, _ = make_campaign(tmp_path / "c", "qlearning", [2, 3], workload="register", histories=[register_history()])
    (bundle,) = [p.name for p in (root / "bugs").iterdir() if p.name.startswith("register-")]
    build_report([root], ReportOptions(max_events=50))
    page = (root / "report" / "bugs" / f"{bundle}.html").read_text()
    (linear,) = pictures(page)["linear"]
    bars = elements(ET.fromstring(linear), "g", "op")
    case = orjson.loads((root / "bugs" / bundle / "report.json").read_bytes())["details"]["anomalies"]["nonlinearizable"][0]
    assert len(bars) == len(case["around"]) == 7
    assert [b.get("data-status") for b in bars].count("stuck") == 1
    assert len(pictures(page)["latency"]) == 1


def test_a_bug_without_a_history_says_so(tmp_path):
    root, _ = make_campaign(tmp_path / "c", "qlearning", [2, 3])
    build_report([root], ReportOptions(max_events=50))
    page = (root / "report" / "bugs" / "log-assertion-0123456789ab.html").read_text()
    assert "The bundle holds no client history" in page and not pictures(page)
