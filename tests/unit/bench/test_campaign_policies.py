"""bench/bench_campaign_policies.py: its arithmetic on hand-made plot_data, and --analyze on
fake campaign trees, against numbers worked out by hand. Nothing here runs a campaign."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.report.campaign_data import load_campaign, parse_plot_data
from mallory.timeline.codec import write_records
from mallory.timeline.event import Batch, ClockPair, Event, Kind

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_campaign_policies.py"


def _load_bench():
    """The bench module, imported by path (bench/ is not a package); registered in
    sys.modules first, as its dataclasses need."""
    spec = importlib.util.spec_from_file_location("bench_campaign_policies", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()

HEADER = "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, new_state, feedback_ms, pairs_covered, waypoint\n"
#: a header from before pairs_covered and waypoint existed
OLD_HEADER = "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, new_state, feedback_ms\n"


def plot_file(tmp_path: Path, text: str) -> list:
    """Parse a hand-written plot_data file."""
    path = tmp_path / "plot_data"
    path.write_text(text)
    return parse_plot_data(path.read_text(), str(path))


# -- curves -------------------------------------------------------------------------------------


def test_curves_from_a_hand_made_plot_data(tmp_path):
    rows = plot_file(tmp_path, HEADER + (
        "10.0, 0, 1, 3, 0, 0, noop, 1, 1, 5.0, 20, 0\n"
        "20.5, 0, 2, 6, 0, 0, kill, 2, 1, 5.0, 40, 1\n"
        "31.0, 1, 3, 6, 1, 0, heal, 2, 0, 5.0, 45, 0\n"
    ))
    states = bench.curve_of(rows, "time_s", "distinct_states")
    assert states == [(10.0, 3.0), (20.5, 6.0), (31.0, 6.0)]
    assert bench.curve_of(rows, "steps_done", "pairs_covered") == [(1.0, 20.0), (2.0, 40.0), (3.0, 45.0)]
    # before the first step nothing was counted; between points, the last one's count
    assert [bench.value_at(states, t) for t in (0.0, 9.9, 10.0, 20.4, 20.5, 99.0)] == [0, 0, 3, 3, 6, 6]


def test_a_plot_data_written_before_pairs_existed_has_no_pairs_curve(tmp_path):
    rows = plot_file(tmp_path, OLD_HEADER + "10.0, 0, 1, 3, 0, 0, noop, 1, 1, 5.0\n")
    assert bench.curve_of(rows, "time_s", "pairs_covered") is None
    assert bench.curve_of(rows, "time_s", "distinct_states") == [(10.0, 3.0)]


def test_mean_curve_steps_wherever_a_curve_steps_and_stops_at_until():
    a = [(10.0, 2.0), (30.0, 4.0), (50.0, 9.0)]
    b = [(20.0, 6.0), (40.0, 8.0)]
    # points at 10, 20, 30 (a's), 20, 40 (b's) and 35 (until); 50 is past it
    assert bench.mean_curve([a, b], 35.0) == [(10.0, 1.0), (20.0, 4.0), (30.0, 5.0), (35.0, 5.0)]
    assert bench.mean_curve([a, b], 60.0)[-1] == (60.0, 8.5)


def test_time_to_reach_and_speedup():
    baseline = [(10.0, 2.0), (20.0, 5.0), (40.0, 8.0)]  # its final mean 8 at 40
    faster = [(5.0, 4.0), (10.0, 8.0), (40.0, 12.0)]  # 8 at 10: four times sooner
    slower = [(10.0, 1.0), (40.0, 7.0)]  # never 8
    assert bench.time_to_reach(baseline, 5.0) == 20.0
    assert bench.time_to_reach(baseline, 5.1) == 40.0
    assert bench.time_to_reach(slower, 8.0) is None
    assert bench.speedup(baseline, faster) == 4.0
    assert bench.speedup(baseline, baseline) == 1.0
    assert bench.speedup(baseline, slower) is None


def test_bend_compares_the_first_and_last_thirds_per_hour():
    # horizon 3 h: 30 new states in the first hour, 6 in the last
    curve = [(600.0, 10.0), (3600.0, 30.0), (7200.0, 40.0), (9000.0, 44.0), (10800.0, 46.0)]
    bent = bench.bend(curve, 10800.0)
    assert (bent.first_third_per_h, bent.last_third_per_h, bent.bends) == (30.0, 6.0, True)
    straight = bench.bend([(3600.0, 10.0), (7200.0, 20.0), (10800.0, 30.0)], 10800.0)
    assert (straight.first_third_per_h, straight.last_third_per_h, straight.bends) == (10.0, 10.0, False)
    mean = bench.mean_bend([bent, straight])
    assert (mean.first_third_per_h, mean.last_third_per_h, mean.bends) == (20.0, 8.0, True)


# -- times to an event ----------------------------------------------------------------------------


def test_censored_median():
    m = bench.censored_median([30.0, None, 10.0], horizon=100.0)  # 10, 30, (100)
    assert (m.value, m.lower_bound, m.happened, m.runs) == (30.0, False, 2, 3)
    m = bench.censored_median([30.0, None, 150.0, 10.0], horizon=100.0)  # 10, 30, (100), (100): 150 is past it
    assert (m.value, m.lower_bound, m.happened, m.runs) == (65.0, True, 2, 4)
    m = bench.censored_median([20.0, 40.0, 60.0, None], horizon=100.0)
    assert (m.value, m.lower_bound, m.happened) == (50.0, False, 3)
    m = bench.censored_median([None, None], horizon=100.0)
    assert (m.value, m.lower_bound, m.happened) == (100.0, True, 0)
    with pytest.raises(ValueError):
        bench.censored_median([], horizon=1.0)


def test_median_ratio_says_when_it_is_a_bound():
    exact = bench.CensoredMedian(20.0, False, 3, 3)
    censored = bench.CensoredMedian(100.0, True, 1, 3)
    assert bench.median_ratio(bench.CensoredMedian(60.0, False, 3, 3), exact) == (3.0, "=")
    assert bench.median_ratio(censored, exact) == (5.0, ">=")  # the baseline's is really later
    assert bench.median_ratio(exact, censored) == (0.2, "<=")
    assert bench.median_ratio(censored, censored) == (None, "n/a")


# -- command line and running -----------------------------------------------------------------


def test_parse_variant():
    assert bench.parse_variant("bonusmax=--policy bonus-max --waypoints 'a b.toml'") == (
        "bonusmax", ("--policy", "bonus-max", "--waypoints", "a b.toml"))
    assert bench.parse_variant("paper=") == ("paper", ())
    for bad in ("random", "a/b=--policy random", "x=--waypoints 'unclosed"):
        with pytest.raises(Exception, match="NAME=ARGS|quotation"):
            bench.parse_variant(bad)


def test_parse_waypoints_reached():
    assert bench.parse_waypoints_reached("-") == {}
    assert bench.parse_waypoints_reached("leader-elected:3,log-rollback:1") == {"leader-elected": 3, "log-rollback": 1}


def test_sut_targets_by_name_or_spec():
    assert bench.sut_target("raft-kv").workload == "list-append"
    by_path = bench.sut_target(str(bench.EXAMPLE_DIR / "example-bugs.toml"))
    assert by_path is bench.KNOWN_SUTS["example-bugs"]  # its workload, build and seeded bugs
    with pytest.raises(Exception, match="neither a known SUT"):
        bench.sut_target("no-such-sut")


def fake_run_batch(batches: list, threshold: float = 0.42):
    """A fake run_batch for tests of run_campaigns: records each batch, and a calibration
    job "calibrates" by writing the campaign.json a real one would (threshold `threshold`)."""

    def run(jobs):
        batches.append(jobs)
        for job in jobs:
            if " calibration " in job.label:
                job.out.mkdir(parents=True)
                (job.out / "campaign.json").write_text(json.dumps(
                    {"sut": "etcd", "threshold": threshold, "calibration": {"windows": 30, "threshold": threshold}}))
    return run


def test_campaigns_are_laid_out_and_batched_side_by_side(tmp_path, monkeypatch):
    spec = tmp_path / "mine.toml"
    spec.write_text("")
    batches = []
    monkeypatch.setattr(bench, "run_batch", fake_run_batch(batches))
    args = bench.parse_args(["--sut", str(spec), "--sut", "etcd", "--seeds", "1", "2", "--duration", "1m",
                             "--variant", "random=--policy random", "--variant", "w=--policy bonus-max --workload register",
                             "--side-by-side"])
    bench.run_campaigns(args, tmp_path / "out")
    assert [[job.label for job in batch] for batch in batches] == [
        ["mine calibration seed 1"], ["mine random seed 1", "mine w seed 1"],
        ["mine calibration seed 2"], ["mine random seed 2", "mine w seed 2"],
        ["etcd calibration seed 1"], ["etcd random seed 1", "etcd w seed 1"],
        ["etcd calibration seed 2"], ["etcd random seed 2", "etcd w seed 2"]]
    calibration = batches[4][0]
    assert calibration.out == tmp_path / "out" / "etcd" / "calibration" / "1"
    assert calibration.argv[-2:] == ("--schedules", "0")
    job = batches[5][1]
    assert job.out == tmp_path / "out" / "etcd" / "w-1"
    assert job.log == tmp_path / "out" / "etcd" / "w-1.log"
    # the SUT's workload, the shared threshold, then the variant's arguments last: they win
    assert job.argv[3:] == ("fuzz", "--plain", "--sut", "etcd", "--nodes", "3", "--duration", "1m", "--seed", "1",
                            "--out", str(job.out), "--workload", "list-append", "--threshold", "0.42",
                            "--calibrate", "0", "--policy", "bonus-max", "--workload", "register")
    assert "--workload" not in batches[1][0].argv  # a spec's: fuzz's default
    assert bench.find_runs(tmp_path / "out") == {}  # calibrations are no variant's runs


def test_a_variant_with_its_own_yardstick_keeps_it(tmp_path, monkeypatch):
    batches = []
    monkeypatch.setattr(bench, "run_batch", fake_run_batch(batches, threshold=0.5))
    args = bench.parse_args(["--sut", "etcd", "--seeds", "1", "--side-by-side"])
    bench.run_campaigns(args, tmp_path)
    random, qlearning, paper = batches[1]
    assert random.argv[-6:] == ("--threshold", "0.5", "--calibrate", "0", "--policy", "random")
    assert qlearning.argv[-6:] == ("--threshold", "0.5", "--calibrate", "0", "--policy", "qlearning")
    assert "--threshold" not in paper.argv and paper.argv[-2:] == ("--preset", "paper")
    assert bench.sets_own_yardstick(("--threshold=0.3",)) and not bench.sets_own_yardstick(("--policy", "random"))
    # only variants with their own yardstick: nothing to calibrate once
    batches.clear()
    args = bench.parse_args(["--sut", "etcd", "--seeds", "1", "--variant", "a=--calibrate 20",
                             "--variant", "b=--abstraction event-count", "--baseline", "a"])
    bench.run_campaigns(args, tmp_path / "x")
    assert [[job.label for job in batch] for batch in batches] == [["etcd a seed 1"], ["etcd b seed 1"]]


def test_a_calibration_that_recorded_no_threshold_stops_the_bench(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_batch", lambda jobs: None)
    args = bench.parse_args(["--sut", "etcd", "--seeds", "1"])
    with pytest.raises(SystemExit, match="recorded no calibrated threshold"):
        bench.run_campaigns(args, tmp_path)


def test_one_after_the_other_and_never_over_an_existing_campaign(tmp_path, monkeypatch):
    batches = []
    monkeypatch.setattr(bench, "run_batch", fake_run_batch(batches))
    args = bench.parse_args(["--sut", "etcd", "--seeds", "3"])
    bench.run_campaigns(args, tmp_path)
    assert [[job.label for job in batch] for batch in batches] == [
        ["etcd calibration seed 3"], ["etcd random seed 3"], ["etcd qlearning seed 3"], ["etcd paper seed 3"]]
    (tmp_path / "etcd" / "paper-3").mkdir(parents=True)
    (tmp_path / "etcd" / "paper-3" / "campaign.json").write_text("{}")
    with pytest.raises(SystemExit, match="paper-3"):
        bench.run_campaigns(args, tmp_path)


def test_the_rounds_set_runs_each_sampler_with_its_own_fault_whatever_the_bench_faults(tmp_path, monkeypatch):
    batches = []
    monkeypatch.setattr(bench, "run_batch", fake_run_batch(batches))
    # nothing is built here
    monkeypatch.setitem(bench.KNOWN_SUTS, "example-bugs", replace(bench.KNOWN_SUTS["example-bugs"], prepare=None))
    args = bench.parse_args(["--sut", "example-bugs", "--seeds", "1", "--variants", "rounds", "--side-by-side",
                             "--faults", "partition,kill,pause"])
    assert list(args.variants) == ["random", "rounds", "random-drop", "poisson-crash"] and args.baseline == "random"
    bench.run_campaigns(args, tmp_path)
    random, rounds, drop, crash = batches[-1]
    assert random.argv[-8:] == ("--faults", "partition,kill,pause", "--threshold", "0.42", "--calibrate", "0",
                                "--policy", "random")
    # the bench's --faults comes first, the variant's own last: argparse keeps the last
    assert rounds.argv[-4:] == ("--policy", "rounds", "--faults", "rounds:lossy-sync")
    assert drop.argv[-4:] == ("--policy", "random-drop", "--faults", "rounds:random-drop")
    assert crash.argv[-4:] == ("--policy", "poisson-crash", "--faults", "crash:poisson")
    assert "partition,kill,pause" in crash.argv[:-4]
    # --variant replaces the set
    assert list(bench.parse_args(["--variants", "rounds", "--variant", "random=--policy random"]).variants) == ["random"]


def test_the_sooner_a12_and_p_rank_a_run_without_the_event_last():
    # every variant run sooner than every baseline run: Â12 1, exact p = 1 / C(4, 2)
    assert bench.sooner_than([10.0, 20.0], [30.0, 80.0]) == (1.0, pytest.approx(1 / 6))
    # never (None) ranks after 40 and 60; the two baseline runs without it tie with each other
    a12, p = bench.sooner_than([40.0, 60.0], [None, None])
    assert a12 == 1.0 and p == pytest.approx(0.5 * math.erfc(1.5 / math.sqrt(1.5) / math.sqrt(2)))
    assert bench.sooner_than([None], [None]) == (0.5, 1.0)  # nothing to tell apart
    assert bench.sooner_than([None, 5.0], [5.0, 1.0])[0] == pytest.approx((0 + 0 + 0.5 + 0) / 4)


def test_the_baseline_must_be_a_variant(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--variant", "a=--policy random", "--baseline", "random"])
    assert "--baseline random is not a variant" in capsys.readouterr().err


# -- --analyze on fake campaign trees ---------------------------------------------------------------


def fake_campaign(root: Path, rows, *, sut: str = "raft-kv", waypoints: str = "-", started_ns: int | None = None) -> None:
    """A campaign directory as `mallory fuzz` writes it (its own writers: today's plot_data
    header), from rows of (time s, steps, schedules, states, bugs, pairs)."""
    directory = CampaignDir(root)
    directory.create(CampaignConfig(sut=sut, threshold=0.6))
    for time_s, steps, schedules, states, bugs, pairs in rows:
        directory.append_plot({"relative_time": time_s, "schedules_done": schedules, "steps_done": steps,
                               "corpus_count": states, "saved_crashes": bugs, "late_steps": 0, "action": "noop",
                               "state": "", "new_state": 0, "feedback_ms": "", "edges_found": pairs, "waypoint": 0})
    directory.write_stats({"start_time": 1_700_000_000, "waypoints_reached": waypoints})
    if started_ns is not None:
        directory.write_schedule(0, {"index": 0, "started_ns": started_ns, "steps": []})


def raft_kv_tree(root: Path) -> None:
    """Two variants x two seeds, the numbers of test_analyze_prints_hand_computed_numbers."""
    sut = root / "raft-kv"
    fake_campaign(sut / "random-1", [(10, 1, 0, 3, 0, 20), (20, 2, 0, 6, 0, 40), (30, 3, 1, 9, 0, 60),
                                     (40, 4, 1, 10, 1, 100)], waypoints="a:2,b:1")
    fake_campaign(sut / "random-2", [(10, 1, 0, 4, 0, 30), (20, 2, 0, 8, 0, 50), (30, 3, 1, 12, 0, 70),
                                     (45, 4, 1, 12, 0, 120)], waypoints="a:1")
    fake_campaign(sut / "qlearning-1", [(15, 1, 0, 5, 0, 40), (30, 2, 1, 15, 1, 60), (50, 3, 1, 20, 1, 110),
                                        (60, 4, 2, 25, 1, 150)])
    fake_campaign(sut / "qlearning-2", [(15, 1, 0, 6, 0, 90), (30, 2, 1, 18, 0, 95), (40, 3, 1, 21, 0, 130)])


def table_row(output: str, label: str) -> list[str]:
    """The cells of the first table row with this label, split on runs of 2+ spaces."""
    for line in output.splitlines():
        if line.startswith(f"  {label}  "):
            return [cell.strip() for cell in line[len(label) + 2:].split("  ") if cell.strip()]
    raise AssertionError(f"no row {label!r} in:\n{output}")


def section(output: str, title_start: str) -> str:
    """The lines of the output from the section title starting so to the next section."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def test_analyze_prints_hand_computed_numbers(tmp_path, capsys):
    raft_kv_tree(tmp_path / "camps")
    assert bench.main(["--analyze", str(tmp_path / "camps"), "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "== raft-kv: seeds random 1 2, qlearning 1 2; baseline random" in out
    # the shortest campaign ends at 40 s (random-1 does too; qlearning-2 is met first), the
    # fewest steps are qlearning-2's 3
    assert "common horizon: 40 s of wall time (the shortest campaign: qlearning-2), 3 steps (the fewest: qlearning-2)" in out
    assert table_row(out, "state abstraction, threshold") == ["code-history 0.60", "code-history 0.60"]

    # at 40 s: states random 10, 12 (mean 11) vs qlearning 15, 21 (mean 18): 18 / 11 = 1.64;
    # every qlearning run above every random run: A12 1, exact U = 4 of 4, p = 1 / C(4, 2) = 0.167.
    # pairs random 100, 70 (85) vs qlearning 60, 130 (95): 95 / 85 = 1.12; 130 beats both,
    # 60 neither: A12 2 / 4, p = P(U >= 2) = 4 / 6.
    by_time = section(out, "per wall-clock time")
    assert table_row(by_time, "distinct states") == ["11.0 (10–12)", "18.0 (15–21)"]
    assert table_row(by_time, "pairs covered") == ["85.0 (70–100)", "95.0 (60–130)"]
    assert table_row(by_time, "steps done") == ["3.5 (3–4)", "2.5 (2–3)"]
    assert table_row(by_time, "schedules done") == ["1.0 (1–1)", "1.0 (1–1)"]
    assert table_row(by_time, "states: ratio / Â12 / p, vs random") == ["—", "1.64x / 1.00 / 0.167"]
    assert table_row(by_time, "pairs: ratio / Â12 / p, vs random") == ["—", "1.12x / 0.50 / 0.667"]
    # random's mean states reach 11 at 40 s, qlearning's (5+6)/2, (15+18)/2 reach it at 30 s;
    # random's mean pairs reach 85 at 40 s, qlearning's 65, 77.5, 95 only at 40 s
    assert table_row(by_time, "states: speed-up to random's 11.0") == ["—", "1.33x"]
    assert table_row(by_time, "pairs: speed-up to random's 85.0") == ["—", "1.00x"]
    # thirds of 40 s (270 per hour per state): random 3 and 4 states in the first, 4 and 4 in the last
    assert table_row(by_time, "new states/h, first → last third") == ["945 → 1080 (no bend)", "0 → 3375 (no bend)"]

    # at 3 steps: states random 9, 12 vs qlearning 20, 21; pairs 60, 70 vs 110, 130
    by_step = section(out, "per step")
    assert table_row(by_step, "distinct states") == ["10.5 (9–12)", "20.5 (20–21)"]
    assert table_row(by_step, "pairs covered") == ["65.0 (60–70)", "120.0 (110–130)"]
    assert table_row(by_step, "wall time (s)") == ["30.0 (30–30)", "45.0 (40–50)"]
    assert table_row(by_step, "states: ratio / Â12 / p, vs random") == ["—", "1.95x / 1.00 / 0.167"]
    assert table_row(by_step, "pairs: ratio / Â12 / p, vs random") == ["—", "1.85x / 1.00 / 0.167"]
    # random's mean states reach 10.5 at step 3, qlearning's 16.5 at step 2; mean pairs
    # reach 65 at step 3, qlearning's (40 + 90) / 2 at step 1
    assert table_row(by_step, "states: speed-up to random's 10.5") == ["—", "1.50x"]
    assert table_row(by_step, "pairs: speed-up to random's 65.0") == ["—", "3.00x"]

    # the first bug bundle: random-1 at 40 s, qlearning-1 at 30 s, the others none by 40 s
    assert table_row(out, "first bug bundle: per seed") == ["40 –", "30 –"]
    assert table_row(out, "first bug bundle: median (found/seeds)") == ["≥40 (1/2)", "≥35 (1/2)"]
    assert table_row(out, "first bug bundle: random's median / variant's") == ["—", "n/a"]
    assert "  random: a:3, b:1\n  qlearning: -" in out

    document = json.loads((tmp_path / "out.json").read_text())
    qlearning = document["suts"]["raft-kv"]["variants"]["qlearning"]
    assert document["baseline"] == "random"
    assert qlearning["axes"]["time"]["states"]["values"] == [15, 21]
    assert qlearning["axes"]["time"]["states"]["vs_baseline"]["p_greater"] == pytest.approx(1 / 6)
    assert qlearning["axes"]["time"]["pairs"]["vs_baseline"]["a12"] == 0.5
    assert qlearning["axes"]["step"]["pairs"]["vs_baseline"]["speedup"] == 3.0
    assert qlearning["bend"]["bends"] is False
    assert [run["final_time_s"] for run in qlearning["runs"]] == [60, 40]
    assert document["suts"]["raft-kv"]["variants"]["random"]["waypoints_reached"] == {"a": 3, "b": 1}


def test_analyze_says_na_for_pairs_a_campaign_did_not_write(tmp_path, capsys):
    raft_kv_tree(tmp_path)
    plot = tmp_path / "raft-kv" / "random-2" / "plot_data"
    plot.write_text(OLD_HEADER + "10.0, 0, 1, 4, 0, 0, noop, 1, 1, 5.0\n45.0, 1, 4, 12, 0, 0, noop, 1, 1, 5.0\n")
    assert bench.main(["--analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert table_row(section(out, "per wall-clock time"), "pairs covered") == ["n/a", "n/a"]
    assert table_row(section(out, "per step"), "pairs: ratio / Â12 / p, vs random") == ["n/a", "n/a"]
    assert table_row(section(out, "per step"), "pairs: speed-up to random's n/a") == ["n/a", "n/a"]


def test_analyze_without_the_baseline_fails_saying_so(tmp_path, capsys):
    raft_kv_tree(tmp_path)
    assert bench.main(["--analyze", str(tmp_path), "--baseline", "paper"]) == 1
    assert "no runs of the baseline variant 'paper'" in capsys.readouterr().err


# -- seeded bugs: the recording on the real-time axis -------------------------------------------------

ORIGIN_NS = 1_700_000_000_000_000_000
STICKY, STALL = 111, 222


def write_recording(campaign: Path, fires: list[tuple[str, int, float]], torn: bool = False) -> None:
    """events/events.jsonl with (node, id, seconds from the campaign's start) code events:
    n1's monotonic clock reads 7 s at the campaign's start, n2's 100 s."""
    clocks = [ClockPair("n1", 5_000_000_000, ORIGIN_NS - 2_000_000_000), ClockPair("n2", 100_000_000_000, ORIGIN_NS)]
    offsets = {"n1": 7.0, "n2": 100.0}
    batches = [Batch("n1", 0, 1, [Event("n1", Kind.FUNC, 8_000_000_000, 333)])]  # another annotation
    for seq, (node, ident, t) in enumerate(fires, start=1):
        batches.append(Batch(node, seq, 1, [Event(node, Kind.BLOCK, round((t + offsets[node]) * 1e9), ident)]))
    (campaign / "events").mkdir()
    with open(campaign / "events" / "events.jsonl", "wb") as stream:
        write_records(stream, [*clocks, *batches])
        if torn:  # a killed campaign's half-written last line, naming an id
            stream.write(b'{"batch": "n1", "seq": 99, "events": [["BLOCK", 1, %d' % STICKY)


def example_bugs_tree(root: Path) -> None:
    """example-bugs campaigns of 100 s against a spec whose program has a catalogue naming
    both seeded bugs: when each fired, in seconds from the campaign's start."""
    spec = root / "sut" / "spec.toml"
    (root / "sut" / "bin").mkdir(parents=True)
    spec.write_text('name = "fake"\n[start]\ncommand = ["bin/prog"]\n[ports]\nclient = 7000\n')
    Catalogue([CodeEvent(STICKY, "x.c", 1, "f", "BLOCK", "sticky-leader-kept-term"),
               CodeEvent(STALL, "x.c", 2, "g", "BLOCK", "stall-catchup-applied"),
               CodeEvent(333, "x.c", 3, "h", "FUNC", "apply")]).write(root / "sut" / "bin" / "prog.mallory.json")
    fires = {
        # sticky at -1 s is calibration's (before the start); stall at 120 s is past the horizon
        "random-1": [("n1", STICKY, -1.0), ("n1", STICKY, 50.0), ("n1", STICKY, 30.0)],
        "random-2": [("n1", STICKY, 80.0), ("n2", STALL, 120.0)],
        "qlearning-1": [("n2", STICKY, 10.0), ("n1", STALL, 40.0)],
        "qlearning-2": [("n1", STICKY, 20.0), ("n1", STALL, 60.0)],
    }
    for name, events in fires.items():
        campaign = root / "camps" / "example-bugs" / name
        fake_campaign(campaign, [(50, 1, 0, 1, 0, 1), (100, 2, 1, 2, 0, 2)], sut=str(spec), started_ns=ORIGIN_NS)
        write_recording(campaign, events, torn=name == "random-2")


def test_first_fires_maps_each_node_clock_to_the_campaign_start(tmp_path):
    example_bugs_tree(tmp_path)
    campaign = tmp_path / "camps" / "example-bugs"
    labels = {STICKY: "sticky", STALL: "stall"}
    data = load_campaign(campaign / "random-1")
    assert bench.campaign_origin_ns(data) == ORIGIN_NS
    assert bench.first_fires(data.recordings(), labels, ORIGIN_NS) == {"sticky": 30.0}
    assert bench.first_fires(load_campaign(campaign / "qlearning-1").recordings(), labels, ORIGIN_NS) == {
        "sticky": 10.0, "stall": 40.0}
    # the torn last line ends the reading, what came before stays
    assert bench.first_fires(load_campaign(campaign / "random-2").recordings(), labels, ORIGIN_NS) == {
        "sticky": 80.0, "stall": 120.0}


def test_the_origin_without_a_finished_schedule_is_fuzzer_stats_start_time(tmp_path):
    fake_campaign(tmp_path / "c", [(1, 1, 0, 1, 0, 1)])
    assert bench.campaign_origin_ns(load_campaign(tmp_path / "c")) == 1_700_000_000 * 10**9


def test_analyze_times_the_seeded_bugs(tmp_path, capsys):
    example_bugs_tree(tmp_path)
    assert bench.main(["--analyze", str(tmp_path / "camps")]) == 0
    out = capsys.readouterr().out
    # sticky: random 30, 80 (median 55), qlearning 10, 20 (median 15): 55 / 15 = 3.67
    assert table_row(out, "sticky-leader-kept-term fired: per seed") == ["30 80", "10 20"]
    assert table_row(out, "sticky-leader-kept-term fired: median (fired/seeds)") == ["55 (2/2)", "15 (2/2)"]
    assert table_row(out, "sticky-leader-kept-term fired: random's median / variant's") == ["—", "3.67x"]
    # stall: random never by the horizon (100, censored), qlearning 40, 60 (50): at least 2x
    assert table_row(out, "stall-catchup-applied fired: per seed") == ["– –", "40 60"]
    assert table_row(out, "stall-catchup-applied fired: median (fired/seeds)") == ["≥100 (0/2)", "50 (2/2)"]
    assert table_row(out, "stall-catchup-applied fired: random's median / variant's") == ["—", "≥2.00x"]
    # Â12 / p of "sooner than random": sticky 10, 20 against 30, 80 (exact: 1 / 6); stall
    # 40, 60 against two runs where it never fired (tied: the normal approximation)
    assert table_row(out, "sticky-leader-kept-term fired: Â12 / p, sooner than random") == ["—", "1.00 / 0.167"]
    assert table_row(out, "stall-catchup-applied fired: Â12 / p, sooner than random") == ["—", "1.00 / 0.110"]


def test_a_bug_bundle_counts_for_the_seeded_bugs_whose_code_ran_in_its_schedule():
    """Found = the first sighting of any bundle in a schedule during which the seeded bug's
    annotation fired; firing outside every bundle's schedule finds nothing."""
    from types import SimpleNamespace

    s = 1_000_000_000
    data = SimpleNamespace(
        schedules=[{"index": 0, "started_ns": 0, "ended_ns": 10 * s}, {"index": 1, "started_ns": 10 * s, "ended_ns": 20 * s}],
        bugs=[SimpleNamespace(sightings=[{"schedule": 1, "time": 19.0}, {"schedule": 0, "time": 9.5}])],
    )
    fired = {"sticky": [12 * s], "stall": [3 * s, 15 * s], "never-with-a-bug": [25 * s]}
    found = bench.bugs_found_by(data, fired, origin_ns=2 * s)
    assert found == {"sticky": 17.0, "stall": 7.5}


def test_seeded_bugs_need_the_catalogue(tmp_path, capsys):
    example_bugs_tree(tmp_path)
    (tmp_path / "sut" / "bin" / "prog.mallory.json").unlink()
    assert bench.main(["--analyze", str(tmp_path / "camps")]) == 1
    assert "no annotation catalogue" in capsys.readouterr().err


# -- saved runs: --save-runs, and --analyze of files and roots together --------------------------------


def report(capsys) -> str:
    """What the last main printed, without --save-runs' and --json's notes."""
    lines = capsys.readouterr().out.splitlines()
    return "\n".join(line for line in lines if not line.startswith("every number as JSON") and " runs saved in " not in line)


@pytest.mark.parametrize("tree, camps", [(raft_kv_tree, "."), (example_bugs_tree, "camps")])
def test_saved_runs_analyze_as_their_campaign_directories(tmp_path, capsys, tree, camps):
    tree(tmp_path)
    root, saved = tmp_path / camps, tmp_path / "results" / "runs.json"
    assert bench.main(["--analyze", str(root), "--save-runs", str(saved), "--json", str(tmp_path / "a.json")]) == 0
    from_directories = report(capsys)
    assert bench.main(["--analyze", str(saved), "--json", str(tmp_path / "b.json")]) == 0
    assert report(capsys) == from_directories
    assert (tmp_path / "b.json").read_text() == (tmp_path / "a.json").read_text()
    assert bench.analyze([s.run for s in bench.load_runs(saved)], "random") == bench.analyze(bench.read_runs(root), "random")

    document = json.loads(saved.read_text())
    assert (document["format"], document["version"]) == (bench.RUNS_FORMAT, 1)
    writer = document["provenance"][0]
    assert writer["argv"] == ["--analyze", str(root), "--save-runs", str(saved), "--json", str(tmp_path / "a.json")]
    assert set(writer) == {"commit", "dirty", "argv", "date"}
    first = document["runs"][0]
    assert [(run["sut"], run["variant"], run["seed"]) for run in document["runs"]][:2] == [
        (first["sut"], "qlearning", 1), (first["sut"], "qlearning", 2)]
    assert list(first["plot"]) == [f.name for f in bench.fields(bench.PlotRow)]
    # a column is one line
    assert f'"steps_done": {json.dumps(first["plot"]["steps_done"])}' in saved.read_text()


def test_saved_runs_keep_the_seeded_bug_times(tmp_path, capsys):
    example_bugs_tree(tmp_path)
    saved = tmp_path / "runs.json"
    assert bench.main(["--analyze", str(tmp_path / "camps"), "--save-runs", str(saved)]) == 0
    runs = {(s.run.variant, s.run.seed): s.run for s in bench.load_runs(saved)}
    assert runs["qlearning", 1].seeded_fires == {"sticky-leader-kept-term": 10.0, "stall-catchup-applied": 40.0}
    assert runs["random", 1].seeded_bugs == bench.EXAMPLE_SEEDED_BUGS
    assert runs["random", 1].root == tmp_path / "camps" / "example-bugs" / "random-1"


def split_raft_kv_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """raft_kv_tree whole, and its random and its qlearning runs in two other roots."""
    raft_kv_tree(tmp_path / "whole")
    for variant in ("random", "qlearning"):
        (tmp_path / variant / "raft-kv").mkdir(parents=True)
        for seed in (1, 2):
            (tmp_path / "whole" / "raft-kv" / f"{variant}-{seed}").rename(tmp_path / variant / "raft-kv" / f"{variant}-{seed}")
    raft_kv_tree(tmp_path / "whole")
    return tmp_path / "whole", tmp_path / "random", tmp_path / "qlearning"


def test_the_runs_of_several_files_and_roots_are_analyzed_together(tmp_path, capsys):
    whole, random, qlearning = split_raft_kv_tree(tmp_path)
    assert bench.main(["--analyze", str(whole)]) == 0
    expected = report(capsys)
    a, b, union = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "union.json"
    assert bench.main(["--analyze", str(random), "--save-runs", str(a), "--baseline", "random"]) == 0
    # qlearning alone has no baseline: the analysis fails, the runs are saved all the same
    assert bench.main(["--analyze", str(qlearning), "--save-runs", str(b)]) == 1
    capsys.readouterr()
    assert bench.main(["--analyze", str(a), str(b), "--save-runs", str(union)]) == 0
    assert report(capsys) == expected
    # a file and a root, repeatable
    assert bench.main(["--analyze", str(b), "--analyze", str(random)]) == 0
    assert report(capsys) == expected
    # the union keeps each run's provenance: its own writer's first, then those of the files
    # it read them from (b's for qlearning, a's for random)
    document = json.loads(union.read_text())
    assert [p["argv"][p["argv"].index("--save-runs") + 1] for p in document["provenance"]] == [str(union), str(b), str(a)]
    assert [(run["variant"], run["provenance"]) for run in document["runs"]] == [
        ("qlearning", 1), ("qlearning", 1), ("random", 2), ("random", 2)]


def test_the_same_run_twice_counts_once_and_two_different_ones_are_an_error(tmp_path, capsys):
    whole, _, _ = split_raft_kv_tree(tmp_path)
    saved = tmp_path / "runs.json"
    assert bench.main(["--analyze", str(whole), "--save-runs", str(saved)]) == 0
    expected = report(capsys)
    assert bench.main(["--analyze", str(whole), str(saved), str(saved)]) == 0
    assert report(capsys) == expected
    # random-2 ran again, longer
    other = tmp_path / "other"
    fake_campaign(other / "raft-kv" / "random-2", [(10, 1, 0, 4, 0, 30), (50, 2, 0, 9, 0, 60)])
    assert bench.main(["--analyze", str(saved), str(other)]) == 1
    err = capsys.readouterr().err
    assert err == (f"bench_campaign_policies.py: raft-kv random-2 is in {saved} and in {other}, and the two differ: "
                   "give one of them\n")


def test_runs_of_one_sut_timed_for_different_seeded_bugs_are_an_error(tmp_path, capsys):
    example_bugs_tree(tmp_path)
    saved = tmp_path / "runs.json"
    assert bench.main(["--analyze", str(tmp_path / "camps"), "--save-runs", str(saved)]) == 0
    document = json.loads(saved.read_text())
    document["runs"][0]["seeded_bugs"] = ["sticky-leader-kept-term"]
    saved.write_text(json.dumps(document))
    capsys.readouterr()
    assert bench.main(["--analyze", str(saved)]) == 1
    assert capsys.readouterr().err == ("bench_campaign_policies.py: example-bugs: its runs were timed for different "
                                       "seeded bugs: [sticky-leader-kept-term] vs "
                                       "[sticky-leader-kept-term, stall-catchup-applied]\n")


def edited(change):
    """A spoiler that changes the saved document in place and writes it."""
    def spoil(document):
        change(document)
        return document
    return spoil


def spoil_column(document):
    document["runs"][0]["plot"]["distinct_states"][2] = None


@pytest.mark.parametrize("spoil, what", [
    (lambda d: "{", "not a saved-runs file: Expecting property name"),
    (lambda d: [], "malformed saved-runs file: the document is [], expected object"),
    (edited(lambda d: d.update(format="other")), 'malformed saved-runs file: format is "other", expected'),
    (edited(lambda d: d.update(version=2)), "malformed saved-runs file: version 2, this bench reads 1"),
    (edited(lambda d: d.update(runs=[])), "malformed saved-runs file: no runs"),
    (edited(lambda d: d["runs"][0].pop("variant")), "malformed saved-runs file: runs[0].variant is missing, expected string"),
    (edited(lambda d: d["runs"][1].update(seed="1")), 'malformed saved-runs file: runs[1].seed is "1", expected integer'),
    (edited(lambda d: d["runs"][0].update(seed=True)), "runs[0].seed is true, expected integer"),
    (edited(lambda d: d["runs"][0].update(provenance=1)), "runs[0].provenance is 1, and there are 1"),
    (edited(lambda d: d["runs"][2]["seeded_fires"].update(x="soon")), 'runs[2].seeded_fires["x"] is "soon", expected number'),
    (edited(spoil_column), "runs[0].plot.distinct_states[2] is null, expected integer"),
    (edited(lambda d: d["runs"][0]["plot"]["pairs_covered"].pop()), "runs[0].plot.pairs_covered has 3 values, time_s 4"),
    (edited(lambda d: d["runs"][0]["plot"].pop("action")), "runs[0].plot: no column action"),
    (edited(lambda d: d["runs"][0]["plot"].update(colour=[])), "runs[0].plot: unknown column colour"),
])
def test_a_malformed_saved_runs_file_is_a_one_line_error_naming_it(tmp_path, capsys, spoil, what):
    raft_kv_tree(tmp_path / "camps")
    saved = tmp_path / "runs.json"
    assert bench.main(["--analyze", str(tmp_path / "camps"), "--save-runs", str(saved)]) == 0
    spoilt = spoil(json.loads(saved.read_text()))
    saved.write_text(spoilt if isinstance(spoilt, str) else json.dumps(spoilt))
    capsys.readouterr()
    assert bench.main(["--analyze", str(saved)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bench_campaign_policies.py: {saved}: ") and what in err and err.count("\n") == 1, err


def test_a_missing_plot_column_with_a_default_is_its_default(tmp_path):
    raft_kv_tree(tmp_path / "camps")
    saved = tmp_path / "runs.json"
    bench.save_runs([bench.SourcedRun(run, "x") for run in bench.read_runs(tmp_path / "camps")], saved, {})
    document = json.loads(saved.read_text())
    del document["runs"][0]["plot"]["pairs_covered"]  # as a campaign before pairs existed
    saved.write_text(json.dumps(document))
    run = bench.load_runs(saved)[0].run
    assert [row.pairs_covered for row in run.plot] == [None] * 4 and run.plot[0].distinct_states == 5


def test_analyze_a_path_that_is_nothing(tmp_path, capsys):
    assert bench.main(["--analyze", str(tmp_path / "nothing.json")]) == 1
    assert f"{tmp_path / 'nothing.json'}: neither a campaign root nor a saved-runs file" in capsys.readouterr().err
