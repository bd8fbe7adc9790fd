"""Debian's AFL++ tools on a campaign directory: afl-whatsup on a running campaign, afl-plot
on a finished one (mallory/campaign/afl.py maps AFL's names onto a campaign's counters).

The campaign is the loop's, on the fakes of tests/unit/campaign/test_loop.py (no cluster, no
root): its fuzzer_pid is this test's own pid, so afl-whatsup sees it alive. afl-plot hands
plot_data's columns to gnuplot by position; gnuplot's own `stats` on the columns afl-plot
draws shows it reads each as the number meant.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mallory.campaign.afl import AFL_PLOT_COLUMNS
from mallory.campaign.config import CampaignConfig, LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import Campaign
from mallory.campaign.progress import Progress
from mallory.campaign.waypoints import parse_waypoints
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.learner.learner import Learner
from tests.unit.campaign.test_loop import (
    BehaviourTimeline,
    FakeChecker,
    FakeClock,
    FakeNemesis,
)

SCHEDULES = 3
#: what afl-plot draws, by the 1-based column of plot_data (its `using 1:N` clauses)
DRAWN = {2: "cycles_done", 3: "cur_item", 4: "corpus_count", 5: "pending_total", 6: "pending_favs",
         8: "saved_crashes", 9: "saved_hangs", 10: "max_depth", 11: "execs_per_sec", 13: "edges_found"}


def whatsup(sync_dir: Path) -> subprocess.CompletedProcess:
    # TERM=dumb: no colours (tput), so the lines compare as text
    return subprocess.run(["afl-whatsup", str(sync_dir)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TERM": "dumb"})


def fuzz(root: Path, on_update) -> Campaign:
    """A campaign by the loop on fakes: `novel` steps show a new pair and reach a waypoint,
    and two `novel` steps in a schedule are a bug."""
    catalogue = Catalogue([CodeEvent(0x1A, "s.c", 1, "f", "FUNC", "novel-event")])
    waypoints = parse_waypoints('[[waypoint]]\nname = "novelty"\nevents = ["novel-event"]\nfaults = ["novel"]\n',
                                "w.toml", catalogue, [], ["novel", "dull-1", "dull-2", "dull-3"])
    clock, nemesis = FakeClock(), FakeNemesis()
    directory = CampaignDir(root)
    directory.create(CampaignConfig(sut="example-bugs.toml", nodes=3, seed=5, command=("mallory", "fuzz", "--seed", "5")))
    campaign = Campaign(directory, Learner.create(policy="qlearning", seed=5), BehaviourTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=12, window_s=2.5, reset_s=5.0, seed=5), checker=FakeChecker(), sleeper=clock,
                        on_update=on_update, waypoints=waypoints)
    campaign.run(schedules=SCHEDULES)
    return campaign


def test_afl_whatsup_reads_a_running_campaign_and_afl_plot_draws_it(tmp_path):
    sync_dir = tmp_path / "out"  # afl-whatsup's argument: a directory of fuzzer directories
    root = sync_dir / "c1"
    seen: dict[str, tuple[subprocess.CompletedProcess, dict[str, str]]] = {}

    def look(progress: Progress) -> None:
        """afl-whatsup after the first step (one schedule under way, none done), and again
        when the second schedule is under way."""
        moment = {(0, 1): "first step", (1, 13): "second schedule"}.get((progress.schedules_done, progress.steps_done))
        if moment and moment not in seen and (root / "fuzzer_stats").exists():
            seen[moment] = (whatsup(sync_dir), CampaignDir(root).read_stats())

    campaign = fuzz(root, look)
    assert set(seen) == {"first step", "second schedule"}
    for moment, (proc, stats) in seen.items():
        assert proc.returncode == 0 and proc.stderr == "", (moment, proc.stderr)
        out = proc.stdout
        assert f">>> example-bugs.toml x3 (0 days, 0 hrs) fuzzer PID: {os.getpid()} <<<" in out, out
        assert re.search(r"Fuzzers alive : 1$", out, re.M), out
        assert f"items {stats['cur_item']}/{stats['corpus_count']} " in out
        assert f"coverage {stats['bitmap_cvg']}" in out
        assert re.search(rf"Crashes saved : {stats['saved_crashes']}$", out, re.M), out
    first = seen["first step"][1]
    assert first["execs_done"] == "1" and int(first["corpus_count"]) >= 1, "the schedule under way counts"

    final = campaign.dir.read_stats()
    assert final["execs_done"] == str(SCHEDULES) and final["saved_crashes"] == str(campaign.progress.bugs) != "0"
    assert int(final["edges_found"]) == campaign.progress.pairs_covered > 0 and final["max_depth"] == "1"

    # finished: afl-plot draws it
    plots = tmp_path / "plots"
    proc = subprocess.run(["afl-plot", str(root), str(plots)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("high_freq.png", "low_freq.png", "exec_speed.png", "edges.png"):
        assert (plots / name).read_bytes().startswith(b"\x89PNG"), name
    assert "<td>example-bugs.toml x3</td>" in (plots / "index.html").read_text()

    # what gnuplot takes from each column afl-plot draws is the campaign's number there
    rows = [line.split(", ") for line in (root / "plot_data").read_text().splitlines()[1:]]
    assert rows[0][: len(AFL_PLOT_COLUMNS)] and all(len(row) == len(rows[0]) for row in rows)
    for column, name in DRAWN.items():
        assert AFL_PLOT_COLUMNS[column - 1] == name
        script = f"stats '{root / 'plot_data'}' using {column} nooutput; print STATS_records, STATS_max"
        printed = subprocess.run(["gnuplot", "-e", script], capture_output=True, text=True, timeout=60).stderr
        records, largest = (float(word) for word in printed.split())
        assert records == len(rows) and largest == pytest.approx(max(float(row[column - 1]) for row in rows)), name
    assert float(rows[-1][AFL_PLOT_COLUMNS.index("corpus_count")]) == campaign.progress.states
    assert float(rows[-1][AFL_PLOT_COLUMNS.index("edges_found")]) == campaign.progress.pairs_covered
