"""Does Mallory's guidance beat random fault injection (Jepsen's nemesis) and the Mallory
paper's learner as published? Real `mallory fuzz` campaigns, named VARIANTS (each a set of
extra fuzz arguments) x SUTS x SEEDS, each variant compared with a baseline variant.

What it measures, per SUT and variant, at a common horizon, from what each campaign wrote
(plot_data, fuzzer_stats, campaign.json, schedules/, the event recording):

  per wall-clock time, at the shortest campaign's wall time, and per step, at the smallest
  final step count of the SUT's runs (the same steps for every run):
    - distinct states and event pairs covered, mean (min-max) over seeds; steps, schedules
      (per time) or seconds, schedules (per step) done;
    - against the baseline, for states and for pairs: the ratio of the means, Vargha-Delaney
      A12 (P[a variant run > a baseline run], ties 1/2) and the one-sided Mann-Whitney p
      (variant > baseline), and the speed-up: how many times sooner the variant's mean
      curve reached the baseline's final mean count than the baseline's own mean curve did;
  per wall-clock time only:
    - the bend of the state curve: new states per hour in the first and the last third of
      the horizon (mean over seeds); a curve that bends finds fewer in the last third;
    - time to the first bug bundle per seed (plot_data's saved_crashes column: counted when the
      schedule's checks end, so up to a schedule after the step that caused it);
    - for an SUT with seeded bugs (example-bugs): when each bug's annotation first fired as
      a code event in the recording, per seed, the median over seeds (a seed where it did
      not fire by the horizon counts as the horizon: censored), how many fired, and the
      ratio baseline median / variant median (> 1: the variant is faster; ">=" or "<=" when
      one median is censored, so the ratio is a bound), and Â12 that a run of the variant
      had it sooner than a run of the baseline with the one-sided Mann-Whitney p of
      "sooner" (a run without it by the horizon ranks after those with it);
  - waypoints reached (fuzzer_stats, schedules per waypoint summed over seeds; at each
    campaign's end, not at the horizon).

Distinct states are counted by each campaign's own abstraction and similarity threshold
(the table shows them). The threshold is calibrated once per (SUT, seed), not by each
campaign: a calibration-only campaign (`--schedules 0`, OUT/<sut>/calibration/<seed>/) runs
first, alone, and every variant that does not set its own yardstick (--threshold,
--calibrate, --abstraction or --preset) fuzzes with its threshold, uncalibrated. Campaigns
calibrating themselves side by side chose different thresholds (0.47 and 0.41 in one etcd
pair), and their state counts were not strictly comparable. A variant with another
abstraction (the paper preset's event-history) or threshold counts states with another
yardstick. Pairs covered (the happens-before pairs of code and log events, whatever the
abstraction) is the yardstick common to all variants.

Time origin: plot_data's relative_time_s counts from the campaign's start (after the
calibration). The recording's events are on the real-time axis (each node's monotonic clock
mapped through its clock pairs); the campaign's start on that axis is the first schedule's
`started_ns` (schedules/000000.json: taken on the same clock right after the start, within
milliseconds; fuzzer_stats' whole-second `start_time` when no schedule finished). Events
before it (calibration windows, without faults) do not count. (A resumed campaign's downtime
would count in these times, not in plot_data's; this bench never resumes.)

Run (as root: network namespaces; side by side, the variants of one (SUT, seed) run at the
same time, under the same machine load, in the wall time of one). The headline, 4 seeds x
20 minutes of random, qlearning and the paper preset on the example SUT with its seeded bugs
and on raft-kv (8 side-by-side batches of 20 min: about 3 h with start-up and calibration):

    .venv/bin/python bench/bench_campaign_policies.py --sut example-bugs --sut raft-kv \\
        --seeds 1 2 3 4 --duration 20m --side-by-side --out out/policies --json out/policies.json

Issue 19's figure: lossy-synchronous round faults (`--policy rounds`) against random faults
and against the rounds' two baselines (random drop, Poisson crashes), time to each seeded bug
of the example SUT, 4 seeds x 20 minutes with the four variants of a seed side by side
(4 batches of 20 min after their calibrations: about 1.5 h):

    .venv/bin/python bench/bench_campaign_policies.py --sut example-bugs --variants rounds \\
        --seeds 1 2 3 4 --duration 20m --side-by-side --out out/rounds --json out/rounds.json

Any variant: `--variant NAME=ARGS` (repeatable; ARGS one shell-quoted string of fuzz
options, paths relative to the repository), e.g. --variant random="--policy random"
--variant bonusmax="--policy bonus-max --reward none --waypoints suts/example/waypoints.toml".
Campaigns go to OUT/<sut>/<variant>-<seed>/, each with its log beside it (<variant>-<seed>.log).
Re-analyze them, running nothing (everything under DIR with that layout):

    .venv/bin/python bench/bench_campaign_policies.py --analyze out/policies [--baseline random] [--json FILE]

A work session has the machine time of part of an evaluation, and its campaign directories do
not outlive it. So run a part (some seeds: each (SUT, seed) is calibrated on its own) and keep
what the analysis reads of each run in the repository: `--save-runs FILE`, after running the
campaigns or with --analyze, writes every run analyzed (plot rows, yardstick, waypoints,
seeded bug times) with its provenance (commit, arguments, date) as JSON, about 30 KB for a
20-minute run of 400 steps; it is written before the analysis, so a part without the baseline is saved too.
Then analyze the parts together: --analyze takes any number of campaign roots and saved-runs
files and unions their runs per SUT (one (SUT, variant, seed) twice is an error unless both
hold the same values). See bench/results/README.md:

    .venv/bin/python bench/bench_campaign_policies.py --sut example-bugs --seeds 1 2 --duration 20m \\
        --side-by-side --out out/policies --save-runs bench/results/<date>-example-bugs-seeds-1-2.json
    .venv/bin/python bench/bench_campaign_policies.py --analyze bench/results/a.json bench/results/b.json

How to read it: a variant beats the baseline on a count when its ratio is > 1, A12 is large
(>= 0.71: Vargha and Delaney's "large") and p is small; with 4 seeds per variant the
smallest possible one-sided p is 1/70 = 0.014 (every variant run above every baseline run).
The speed-up says how much sooner; the per-step view separates better choices from a
cheaper loop (more steps in the same time). The paper reports 1.54x the states of Jepsen and
a 2.24x speed-up over 24 h.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.errors import MalloryError  # noqa: E402
from mallory.harness.sut_make import make_with_mallory_cc  # noqa: E402
from mallory.report.campaign_data import CampaignData, PlotRow, load_campaign  # noqa: E402
from mallory.report.sources import sut_catalogue  # noqa: E402
from mallory.report.stats import mann_whitney_greater, spread, vargha_delaney_a12  # noqa: E402
from mallory.suts.raft_kv.adapter import build as build_raft_kv  # noqa: E402
from mallory.suts.redis.build import ensure_redis_built  # noqa: E402
from mallory.timeline.codec import MalformedRecord, decode  # noqa: E402
from mallory.timeline.event import Batch, ClockPair, Kind  # noqa: E402

EXAMPLE_DIR = REPO / "suts" / "example"
#: the example SUT's seeded bugs, by the label of the annotation on each bug's code
EXAMPLE_SEEDED_BUGS = ("sticky-leader-kept-term", "stall-catchup-applied")


def build_example_sut() -> None:
    """Build the example SUT with mallory-cc (its specs run build/example-sut: never a stale one)."""
    make_with_mallory_cc(EXAMPLE_DIR, None, "the example SUT")


@dataclass(frozen=True)
class SutTarget:
    """An SUT to fuzz: `sut` is what `mallory fuzz --sut` gets, `workload` the workload it
    runs (None: fuzz's default), `prepare` builds it before any campaign starts (so that
    campaigns started side by side do not race to build it; None: nothing to build), and
    `seeded_bugs` are the annotation labels of its seeded bugs, whose first firing is timed."""

    name: str
    sut: str
    workload: str | None
    prepare: Callable[[], object] | None = None
    seeded_bugs: tuple[str, ...] = ()


KNOWN_SUTS = {
    target.name: target
    for target in (
        SutTarget("example", str(EXAMPLE_DIR / "example.toml"), "register", build_example_sut),
        SutTarget("example-bugs", str(EXAMPLE_DIR / "example-bugs.toml"), "register", build_example_sut,
                  EXAMPLE_SEEDED_BUGS),
        SutTarget("example-bugs-logs", str(EXAMPLE_DIR / "example-bugs-logs.toml"), "register", build_example_sut,
                  EXAMPLE_SEEDED_BUGS),
        SutTarget("raft-kv", "raft-kv", "list-append", build_raft_kv),
        SutTarget("etcd", "etcd", "list-append"),
        SutTarget("redis-sentinel", "redis-sentinel", "list-append", ensure_redis_built),
    )
}

#: the variants compared when none is given: Jepsen-style random faults, Mallory's learner,
#: and the Mallory paper's learner as published
DEFAULT_VARIANTS = {
    "random": ("--policy", "random"),
    "qlearning": ("--policy", "qlearning"),
    "paper": ("--preset", "paper"),
}
#: issue 19's figure: lossy-synchronous round faults against Jepsen-style random faults, and
#: the rounds' two baselines (each sampler variant names its own fault, so a --faults given
#: to the bench for random leaves them be: the variant's arguments come last and win)
ROUND_VARIANTS = {
    "random": ("--policy", "random"),
    "rounds": ("--policy", "rounds", "--faults", "rounds:lossy-sync"),
    "random-drop": ("--policy", "random-drop", "--faults", "rounds:random-drop"),
    "poisson-crash": ("--policy", "poisson-crash", "--faults", "crash:poisson"),
}
#: the named sets of variants (--variants)
VARIANT_SETS = {"guidance": DEFAULT_VARIANTS, "rounds": ROUND_VARIANTS}

# -- running campaigns ------------------------------------------------------------------------


def sut_target(text: str) -> SutTarget:
    """A known SUT's target, by name or by its spec's path, else a spec file's (named by the
    file's stem, with fuzz's default workload); argparse.ArgumentTypeError if it is neither."""
    if text in KNOWN_SUTS:
        return KNOWN_SUTS[text]
    path = Path(text).resolve()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is neither a known SUT ({', '.join(KNOWN_SUTS)}) nor a spec file")
    known = [target for target in KNOWN_SUTS.values() if target.sut == str(path)]
    return known[0] if known else SutTarget(path.stem, str(path), None)


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=ARGS` as (NAME, the arguments of ARGS split as a shell would);
    argparse.ArgumentTypeError for anything else. NAME names directories: letters, digits,
    `_`, `.`, `-`."""
    name, equals, args = text.partition("=")
    if not equals or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise argparse.ArgumentTypeError(f"{text!r}: use NAME=ARGS, NAME of letters, digits, _ . -")
    try:
        return name, tuple(shlex.split(args))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def campaign_dir(root: Path, sut: str, variant: str, seed: int) -> Path:
    """Where one campaign of the evaluation lives: ROOT/<sut>/<variant>-<seed>."""
    return root / sut / f"{variant}-{seed}"


@dataclass(frozen=True)
class Job:
    """One campaign to run: what to call it, its directory, and its command line."""

    label: str
    out: Path
    argv: tuple[str, ...]

    @property
    def log(self) -> Path:
        """The campaign's output, beside its directory."""
        return self.out.with_name(self.out.name + ".log")


def fuzz_argv(target: SutTarget, variant_args: Sequence[str], seed: int, out: Path, args: argparse.Namespace) -> tuple[str, ...]:
    """The `mallory fuzz` command line of one campaign. The variant's arguments come last:
    an option it gives wins over the bench's (argparse keeps the last)."""
    argv = [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--sut", target.sut, "--nodes", str(args.nodes),
            "--duration", args.duration, "--seed", str(seed), "--out", str(out)]
    workload = args.workload or target.workload
    if workload:
        argv += ["--workload", workload]
    if args.faults:
        argv += ["--faults", args.faults]
    return (*argv, *variant_args)


def run_batch(jobs: Sequence[Job]) -> None:
    """Run the jobs' campaigns at the same time, from the repository (a variant's relative
    paths resolve there), each writing its log; once all have ended, exit naming those that
    failed with their logs' tails."""
    running = []
    for job in jobs:
        print(f"== {job.label}: {job.out}", flush=True)
        job.out.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log, "w") as log:
            running.append((job, subprocess.Popen(job.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)))
    failed = []
    for job, process in running:
        code = process.wait()
        output = job.log.read_text(errors="replace").strip()
        if code not in (0, 1):  # `mallory fuzz` exits 1 when its campaign found a bug
            failed.append(f"{job.label}: campaign failed (exit {code}, {job.log}):\n{output[-3000:]}")
        else:
            print(f"{job.label}: {output.splitlines()[-1] if output else ''}", flush=True)
    if failed:
        sys.exit("\n\n".join(failed))


#: fuzz options with which a variant counts states by a yardstick of its own, not the
#: (SUT, seed)'s shared calibrated threshold
OWN_YARDSTICK_OPTIONS = ("--threshold", "--calibrate", "--abstraction", "--preset")


def sets_own_yardstick(variant_args: Sequence[str]) -> bool:
    """Whether a variant's arguments name one of OWN_YARDSTICK_OPTIONS (also as --opt=value)."""
    return any(arg.partition("=")[0] in OWN_YARDSTICK_OPTIONS for arg in variant_args)


def calibration_dir(root: Path, sut: str, seed: int) -> Path:
    """Where the calibration-only campaign of one (SUT, seed) lives (find_runs skips it)."""
    return root / sut / "calibration" / str(seed)


def calibrated_threshold(out: Path) -> float:
    """The threshold a calibration-only campaign recorded in its campaign.json; exits saying
    why when there is none."""
    try:
        calibration = CampaignDir(out).config().calibration
    except MalloryError as exc:
        sys.exit(f"calibration campaign {out} recorded no calibrated threshold ({exc}); see {out}.log")
    if calibration is None:
        sys.exit(f"calibration campaign {out} recorded no calibrated threshold; see {out}.log")
    return calibration.threshold


def run_campaigns(args: argparse.Namespace, root: Path) -> None:
    """Every (SUT, seed, variant) campaign under `root`: all variants of one (SUT, seed) at
    once with --side-by-side, else one after the other, each (SUT, seed) after its
    calibration-only campaign when a variant uses the shared threshold. Refuses before
    starting anything if one of the campaign directories already holds a campaign."""
    plan = [(target, seed, [(name, extra, campaign_dir(root, target.name, name, seed))
                            for name, extra in args.variants.items()])
            for target in args.sut for seed in args.seeds]
    outs = [out for target, seed, variants in plan for *_, out in variants]
    outs += [calibration_dir(root, target.name, seed) for target, seed, _ in plan]
    taken = [str(out) for out in outs if (out / "campaign.json").exists()]
    if taken:
        sys.exit("these campaign directories already hold campaigns (use --analyze, or another --out):\n  "
                 + "\n  ".join(taken))
    for target in {t.name: t for t in args.sut}.values():
        if target.prepare is not None:
            target.prepare()
    for target, seed, variants in plan:
        shared: tuple[str, ...] = ()
        if any(not sets_own_yardstick(extra) for _, extra, _ in variants):
            out = calibration_dir(root, target.name, seed)
            run_batch([Job(f"{target.name} calibration seed {seed}", out,
                           fuzz_argv(target, ("--schedules", "0"), seed, out, args))])
            threshold = calibrated_threshold(out)
            print(f"{target.name} seed {seed}: shared calibrated threshold {threshold:.3f}", flush=True)
            shared = ("--threshold", repr(threshold), "--calibrate", "0")
        batch = [Job(f"{target.name} {name} seed {seed}", out,
                     fuzz_argv(target, extra if sets_own_yardstick(extra) else (*shared, *extra), seed, out, args))
                 for name, extra, out in variants]
        for jobs in [batch] if args.side_by_side else [[job] for job in batch]:
            run_batch(jobs)


# -- reading campaigns ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One campaign of the evaluation, as the analysis needs it (`root`, its directory, only
    names it: a run loaded from a saved-runs file has none any more)."""

    sut: str
    variant: str
    seed: int
    root: Path
    plot: tuple[PlotRow, ...]
    #: how the campaign counted states: its abstraction and (calibrated) similarity threshold
    abstraction: str
    threshold: float
    #: fuzzer_stats' waypoints_reached: waypoint name -> schedules that reached it
    waypoints_reached: Mapping[str, int]
    #: seeded bug label -> seconds from the campaign's start to its first firing (those that fired)
    seeded_fires: Mapping[str, float] = field(default_factory=dict)
    #: seeded bug label -> seconds to the first bug bundle seen in a schedule where the seeded
    #: bug's code ran (firing is necessary, not sufficient: this is the bug found)
    seeded_found: Mapping[str, float] = field(default_factory=dict)
    #: the seeded bug labels it was timed for (its SUT's when it was read)
    seeded_bugs: tuple[str, ...] = ()


def parse_waypoints_reached(text: str) -> dict[str, int]:
    """fuzzer_stats' `waypoints_reached` ("name:count,..." or "-") as {name: count}."""
    if text in ("", "-"):
        return {}
    return {name: int(count) for name, _, count in (item.rpartition(":") for item in text.split(","))}


def campaign_origin_ns(data: CampaignData) -> int:
    """The campaign's start on the recording's real-time axis (Unix ns): the first
    schedule's `started_ns` (the loop reads it from the same clock right after starting the
    campaign's clock), else fuzzer_stats' `start_time` (whole seconds); MalloryError if the
    campaign has neither."""
    if data.schedules:
        return int(data.schedules[0]["started_ns"])
    if data.start_time is None:
        raise MalloryError(f"{data.root}: no schedule and no start_time in fuzzer_stats: when did it start?")
    return int(data.start_time * 1e9)


def first_fires(recordings: Sequence[Path], labels: Mapping[int, str], origin_ns: int) -> dict[str, float]:
    """Seconds from `origin_ns` (real time, ns) to the first code event with each id of
    `labels` (id -> label) in the recordings, by label; events before the origin do not
    count, labels that never fired are absent."""
    first = {}
    for label, times in fire_times(recordings, labels).items():
        after = [t for t in times if t >= origin_ns]
        if after:
            first[label] = (min(after) - origin_ns) / 1e9
    return first


def fire_times(recordings: Sequence[Path], labels: Mapping[int, str]) -> dict[str, list[int]]:
    """Every real time (Unix ns) at which a code event with an id of `labels` (id -> label)
    ran, by label. Event times are mapped to real time through the node's latest clock
    pair. A malformed line (the torn last line of a killed campaign) ends the reading of
    its file."""
    # Only lines holding one of the ids (as text) are decoded: a recording has millions of
    # events, a few of them seeded bugs'.
    needles = [str(ident).encode() for ident in labels]
    fired: dict[str, list[int]] = {}
    for path in recordings:
        clocks: dict[str, ClockPair] = {}
        with open(path, "rb") as stream:
            for lineno, line in enumerate(stream, start=1):
                if not (line.startswith(b'{"clock"') or any(needle in line for needle in needles)):
                    continue
                try:
                    record = decode(line, lineno, str(path))
                except MalformedRecord:
                    break
                if isinstance(record, ClockPair):
                    clocks[record.node] = record
                elif isinstance(record, Batch) and record.node in clocks:
                    for event in record.events:
                        label = labels.get(event.id) if event.kind in (Kind.FUNC, Kind.BLOCK) else None
                        if label is None:
                            continue
                        fired.setdefault(label, []).append(clocks[record.node].to_real(event.ts))
    return fired


def bugs_found_by(data: CampaignData, fired: Mapping[str, Sequence[int]], origin_ns: int) -> dict[str, float]:
    """Per seeded bug label, seconds from `origin_ns` to the first sighting of any bug
    bundle in a schedule during which that label fired (the schedule's started_ns..ended_ns
    span): the bug found, not just its code reached."""
    spans = {s["index"]: (s.get("started_ns"), s.get("ended_ns")) for s in data.schedules}
    found: dict[str, float] = {}
    for bug in data.bugs:
        for sighting in bug.sightings:
            start, end = spans.get(sighting.get("schedule"), (None, None))
            seen = sighting.get("time")
            if not (isinstance(start, int) and isinstance(end, int) and isinstance(seen, (int, float))):
                continue
            for label, times in fired.items():
                if any(start <= t < end for t in times):
                    found[label] = min(found.get(label, float("inf")), (seen * 1e9 - origin_ns) / 1e9)
    return found


def read_run(root: Path, sut: str, variant: str, seed: int, seeded_bugs: Sequence[str]) -> Run:
    """One campaign directory as a Run, its seeded bugs timed through the annotation
    catalogue next to the SUT's program; MalloryError if the directory is not a campaign,
    has no plot rows, or a seeded bug cannot be named (no catalogue, or not in it)."""
    data = load_campaign(root)
    if not data.plot:
        raise MalloryError(f"{root}: no plot_data rows (did the campaign fail? see {root}.log); remove it or rerun it")
    fires: dict[str, float] = {}
    found: dict[str, float] = {}
    if seeded_bugs:
        catalogue = sut_catalogue(data.config.sut)
        if catalogue is None:
            raise MalloryError(f"{root}: no annotation catalogue next to the program of {data.config.sut}: "
                               "build the SUT to name its seeded bugs")
        labels = {event.id: event.label for event in catalogue if event.label in seeded_bugs}
        unnamed = set(seeded_bugs) - set(labels.values())
        if unnamed:
            raise MalloryError(f"{root}: the catalogue of {data.config.sut}'s program has no annotation "
                               f"{', '.join(sorted(unnamed))}")
        origin_ns = campaign_origin_ns(data)
        fired = fire_times(data.recordings(), labels)
        fires = first_fires(data.recordings(), labels, origin_ns)
        found = bugs_found_by(data, fired, origin_ns)
    return Run(sut, variant, seed, root, tuple(data.plot), data.config.abstraction, data.config.threshold,
               parse_waypoints_reached(data.stats.get("waypoints_reached", "-")), fires, found, tuple(seeded_bugs))


def find_runs(root: Path) -> dict[str, list[tuple[str, int, Path]]]:
    """The campaigns under `root` by SUT: ROOT/<sut>/<variant>-<seed>/ holding a
    campaign.json, as (variant, seed, directory) sorted by variant then seed."""
    found: dict[str, list[tuple[str, int, Path]]] = {}
    for sut_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for directory in sut_dir.iterdir():
            variant, _, seed = directory.name.rpartition("-")
            if variant and seed.isdigit() and (directory / "campaign.json").is_file():
                found.setdefault(sut_dir.name, []).append((variant, int(seed), directory))
    return {sut: sorted(runs) for sut, runs in found.items()}


def read_runs(root: Path) -> list[Run]:
    """Every campaign under `root` (ROOT/<sut>/<variant>-<seed>/) as a Run; an SUT known by
    name gets its seeded bugs timed. MalloryError if there are none."""
    found = find_runs(root)
    if not found:
        raise MalloryError(f"{root}: no campaigns in <sut>/<variant>-<seed>/ directories")
    return [read_run(directory, sut, variant, seed, KNOWN_SUTS[sut].seeded_bugs if sut in KNOWN_SUTS else ())
            for sut, entries in found.items() for variant, seed, directory in entries]


# -- saved runs -------------------------------------------------------------------------------
# A session's machine time holds part of an evaluation and its campaign directories do not
# outlive it: what the analysis reads of each run is saved in the repository, and the parts
# are analyzed together later.

#: what a saved-runs file says it is ("format"), and the version of its layout this bench reads
RUNS_FORMAT = "mallory bench_campaign_policies runs"
RUNS_VERSION = 1
#: the JSON types a value may have, by the type names of PlotRow's annotations
JSON_TYPES: dict[str, tuple[type, ...]] = {"float": (float, int), "int": (int,), "str": (str,), "bool": (bool,),
                                           "None": (type(None),)}
#: PlotRow's fields, in order, with the JSON types of their values
PLOT_FIELDS = {f.name: tuple(t for name in str(f.type).split("|") for t in JSON_TYPES[name.strip()])
               for f in fields(PlotRow)}
#: how a JSON type is called in messages
TYPE_NAMES = {float: "number", int: "integer", str: "string", bool: "boolean", type(None): "null", list: "list",
              dict: "object"}


@dataclass(frozen=True)
class SourcedRun:
    """A run, where it was read from (a campaign root or a saved-runs file) and the
    provenance of the file it was saved in (None: read from its campaign directory now)."""

    run: Run
    source: str
    provenance: Mapping[str, object] | None = None


def provenance(argv: Sequence[str]) -> dict[str, object]:
    """Who saves runs: Mallory's git commit (None outside a checkout) and whether tracked
    files differ from it, the bench's arguments, and the date (UTC)."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status), "argv": list(argv),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def run_record(run: Run, provenance_index: int) -> dict[str, object]:
    """A run as a saved-runs file holds it: its plot rows as columns, one list per PlotRow
    field (the names once, not once a row: 1-6 KB a column for 400 steps)."""
    return {"sut": run.sut, "variant": run.variant, "seed": run.seed, "directory": str(run.root),
            "provenance": provenance_index, "abstraction": run.abstraction, "threshold": run.threshold,
            "waypoints_reached": dict(run.waypoints_reached), "seeded_bugs": list(run.seeded_bugs),
            "seeded_fires": dict(run.seeded_fires), "seeded_found": dict(run.seeded_found),
            "plot": {name: [getattr(row, name) for row in run.plot] for name in PLOT_FIELDS}}


def compact_json(value: object, indent: str = "") -> str:
    """`value` as JSON: a list or object of scalars on one line (a plot column is a line),
    anything holding lists or objects over several, indented."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    if not any(isinstance(item, (dict, list)) for item in items):
        return json.dumps(value, ensure_ascii=False)
    inner = indent + "  "
    if isinstance(value, dict):
        lines = [f"{inner}{json.dumps(key, ensure_ascii=False)}: {compact_json(item, inner)}"
                 for key, item in value.items()]
        return "{\n" + ",\n".join(lines) + f"\n{indent}}}"
    return "[\n" + ",\n".join(inner + compact_json(item, inner) for item in value) + f"\n{indent}]"


def save_runs(runs: Sequence[SourcedRun], path: Path, writer: Mapping[str, object]) -> None:
    """Write the runs to a saved-runs file: {"format", "version", "provenance": [writer, then
    those of the files runs were loaded from], "runs": [each with its provenance's index]}."""
    provenances = [writer]
    records = []
    for sourced in runs:
        origin = writer if sourced.provenance is None else sourced.provenance
        if origin not in provenances:
            provenances.append(origin)
        records.append(run_record(sourced.run, provenances.index(origin)))
    document = {"format": RUNS_FORMAT, "version": RUNS_VERSION, "provenance": provenances, "runs": records}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(compact_json(document) + "\n")


def checked(value: Any, types: tuple[type, ...], where: str) -> Any:
    """`value` if its type is exactly one of `types` (a boolean is no integer), else
    ValueError saying what `where` holds instead (MISSING: nothing)."""
    if type(value) not in types:
        held = "missing" if value is MISSING else json.dumps(value)[:40]
        raise ValueError(f"{where} is {held}, expected {' or '.join(TYPE_NAMES[t] for t in types)}")
    return value


def plot_of(columns: Mapping[str, Any], where: str) -> tuple[PlotRow, ...]:
    """Plot rows from their columns, one list per PlotRow field (a field with a default may
    be missing: the campaign did not write that column); ValueError if they are not."""
    unknown = sorted(set(columns) - set(PLOT_FIELDS))
    missing = [f.name for f in fields(PlotRow) if f.default is MISSING and f.name not in columns]
    if unknown or missing:
        raise ValueError(f"{where}: {'unknown' if unknown else 'no'} column {(unknown or missing)[0]}")
    length = len(checked(columns["time_s"], (list,), f"{where}.time_s"))
    for name, values in columns.items():
        if len(checked(values, (list,), f"{where}.{name}")) != length:
            raise ValueError(f"{where}.{name} has {len(values)} values, time_s {length}")
        for i, value in enumerate(values):
            checked(value, PLOT_FIELDS[name], f"{where}.{name}[{i}]")
    if not length:
        raise ValueError(f"{where}: no rows")
    full = {f.name: columns.get(f.name, [f.default] * length) for f in fields(PlotRow)}
    return tuple(PlotRow(*row) for row in zip(*full.values()))


def run_of(record: Mapping[str, Any], where: str, source: str, provenances: Sequence[Any]) -> SourcedRun:
    """A saved run's record as a SourcedRun; ValueError naming the first thing wrong in it."""
    def get(key: str, *types: type) -> Any:
        return checked(record.get(key, MISSING), types, f"{where}.{key}")

    def mapping(key: str, *types: type) -> dict[str, Any]:
        value = get(key, dict)
        for name, item in value.items():
            checked(item, types, f"{where}.{key}[{json.dumps(name)}]")
        return value

    index = get("provenance", int)
    if not 0 <= index < len(provenances):
        raise ValueError(f"{where}.provenance is {index}, and there are {len(provenances)}")
    labels = get("seeded_bugs", list)
    for i, label in enumerate(labels):
        checked(label, (str,), f"{where}.seeded_bugs[{i}]")
    run = Run(get("sut", str), get("variant", str), get("seed", int), Path(get("directory", str)),
              plot_of(get("plot", dict), f"{where}.plot"), get("abstraction", str), get("threshold", float, int),
              mapping("waypoints_reached", int), mapping("seeded_fires", float, int),
              mapping("seeded_found", float, int), tuple(labels))
    return SourcedRun(run, source, provenances[index])


def load_runs(path: Path) -> list[SourcedRun]:
    """The runs of a saved-runs file (save_runs'); MalloryError naming the file and the first
    thing wrong if it is not one this bench reads."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        raise MalloryError(f"{path}: not a saved-runs file: {exc}") from None
    try:
        checked(document, (dict,), "the document")
        if document.get("format") != RUNS_FORMAT:
            raise ValueError(f"format is {json.dumps(document.get('format'))}, expected {json.dumps(RUNS_FORMAT)}")
        if document.get("version") != RUNS_VERSION:
            raise ValueError(f"version {json.dumps(document.get('version'))}, this bench reads {RUNS_VERSION}")
        provenances = checked(document.get("provenance", MISSING), (list,), "provenance")
        records = checked(document.get("runs", MISSING), (list,), "runs")
        if not records:
            raise ValueError("no runs")
        return [run_of(checked(record, (dict,), f"runs[{i}]"), f"runs[{i}]", str(path), provenances)
                for i, record in enumerate(records)]
    except ValueError as exc:
        raise MalloryError(f"{path}: malformed saved-runs file: {exc}") from None


def same_run(a: Run, b: Run) -> bool:
    """Whether two runs hold the same values (their directories only name them)."""
    return replace(a, root=b.root) == b


def gather_runs(paths: Sequence[Path]) -> list[SourcedRun]:
    """The runs of every path, a campaign root or a saved-runs file, by (SUT, variant,
    seed); MalloryError for a path that is neither, or for two runs of one (SUT, variant,
    seed) that differ, naming both sources (identical ones count once: a file saved from a
    root may be given with it)."""
    chosen: dict[tuple[str, str, int], SourcedRun] = {}
    for path in paths:
        if path.is_dir():
            runs = [SourcedRun(run, str(path)) for run in read_runs(path)]
        elif path.is_file():
            runs = load_runs(path)
        else:
            raise MalloryError(f"{path}: neither a campaign root nor a saved-runs file")
        for sourced in runs:
            run = sourced.run
            kept = chosen.setdefault((run.sut, run.variant, run.seed), sourced)
            if not same_run(kept.run, run):
                raise MalloryError(f"{run.sut} {run.variant}-{run.seed} is in {kept.source} and in {sourced.source}, "
                                   "and the two differ: give one of them")
    return [chosen[key] for key in sorted(chosen)]


# -- arithmetic (pure) ------------------------------------------------------------------------

#: a count after each step: (x, count) with x ascending (seconds or steps done)
Curve = list[tuple[float, float]]


def curve_of(plot: Sequence[PlotRow], x: str, y: str) -> Curve | None:
    """The points (row.x, row.y) of a campaign's plot rows, by PlotRow field names; None if
    a row has no y (a column written only by later versions of Mallory)."""
    points = [(float(getattr(row, x)), getattr(row, y)) for row in plot]
    if any(value is None for _, value in points):
        return None
    return [(at, float(value)) for at, value in points]


def value_at(curve: Curve, x: float) -> float:
    """The count at x: that of the last point at or before x; 0 before the first point
    (nothing was counted before the first step)."""
    i = bisect.bisect_right(curve, x, key=lambda point: point[0])
    return curve[i - 1][1] if i else 0.0


def mean_curve(curves: Sequence[Curve], until: float) -> Curve:
    """The pointwise mean of the curves from their first steps up to `until`, exactly: a
    point wherever one of them steps, and one at `until` (the mean of their final counts)."""
    xs = sorted({x for curve in curves for x, _ in curve if x <= until} | {until})
    return [(x, sum(value_at(curve, x) for curve in curves) / len(curves)) for x in xs]


def time_to_reach(curve: Curve, count: float) -> float | None:
    """The first x where the curve is at least `count`; None if it never is."""
    return next((x for x, value in curve if value >= count), None)


def speedup(baseline_mean: Curve, variant_mean: Curve) -> float | None:
    """How many times sooner the variant's mean curve reached the baseline's final mean
    count than the baseline's mean curve did (> 1: sooner); None if it never reached it
    (or reached it at x = 0, which no campaign does)."""
    target = baseline_mean[-1][1]
    reached = time_to_reach(variant_mean, target)
    if not reached:
        return None
    return time_to_reach(baseline_mean, target) / reached


@dataclass(frozen=True)
class Bend:
    """New states per hour in the first and the last third of the horizon, and whether the
    last third found fewer (the curve bends)."""

    first_third_per_h: float
    last_third_per_h: float
    bends: bool = field(init=False)

    def __post_init__(self) -> None:
        """Derive `bends` (kept as a field so that the JSON has it)."""
        object.__setattr__(self, "bends", self.last_third_per_h < self.first_third_per_h)


def bend(curve: Curve, horizon_s: float) -> Bend:
    """The new counts per hour of a curve over time in [0, h/3] and [2h/3, h], h the horizon
    in seconds."""
    third = horizon_s / 3
    per_hour = 3600 / third
    return Bend((value_at(curve, third) - value_at(curve, 0.0)) * per_hour,
                (value_at(curve, horizon_s) - value_at(curve, 2 * third)) * per_hour)


def mean_bend(bends: Sequence[Bend]) -> Bend:
    """The mean rates of several runs' bends."""
    return Bend(sum(b.first_third_per_h for b in bends) / len(bends), sum(b.last_third_per_h for b in bends) / len(bends))


def by_horizon(t: float | None, horizon: float) -> float | None:
    """`t` if the event happened by the horizon, else None: runs are compared up to it only."""
    return t if t is not None and t <= horizon else None


@dataclass(frozen=True)
class CensoredMedian:
    """The median time to an event over runs, where a run without it by the horizon counts
    as the horizon. `lower_bound`: a censored run is in the middle, so the true median is
    at least `value`. `happened` of `runs` had the event by the horizon."""

    value: float
    lower_bound: bool
    happened: int
    runs: int


def censored_median(times: Sequence[float | None], horizon: float) -> CensoredMedian:
    """The median of `times` (None: never happened), a time after `horizon` (or None)
    counting as `horizon`; ValueError for no times."""
    if not times:
        raise ValueError("the median of no times")
    ordered = sorted((horizon, True) if by_horizon(t, horizon) is None else (t, False) for t in times)
    middle = ordered[(len(ordered) - 1) // 2: len(ordered) // 2 + 1]
    return CensoredMedian(sum(t for t, _ in middle) / len(middle), any(censored for _, censored in middle),
                          sum(not censored for _, censored in ordered), len(ordered))


def median_ratio(baseline: CensoredMedian, variant: CensoredMedian) -> tuple[float | None, str]:
    """baseline median / variant median (> 1: the variant is faster) and what the number is:
    "=" exact, ">=" a lower bound (the baseline's median is censored: it is really later),
    "<=" an upper bound (the variant's is); (None, "n/a") when both are censored or the
    variant's median is 0."""
    if (baseline.lower_bound and variant.lower_bound) or variant.value == 0:
        return None, "n/a"
    bound = ">=" if baseline.lower_bound else "<=" if variant.lower_bound else "="
    return baseline.value / variant.value, bound


# -- analysis ---------------------------------------------------------------------------------

#: the two axes runs are compared on: the PlotRow field that is the axis
AXES = {"time": "time_s", "step": "steps_done"}
#: the counts compared with the baseline's: name -> PlotRow field
COMPARED = {"states": "distinct_states", "pairs": "pairs_covered"}
#: the counts shown beside them on each axis: name -> PlotRow field
SHOWN = {"time": {"steps": "steps_done", "schedules": "schedules_done"},
         "step": {"seconds": "time_s", "schedules": "schedules_done"}}


@dataclass(frozen=True)
class Comparison:
    """A variant's count against the baseline's at the horizon: the ratio of the means (None
    when the baseline's is 0), Vargha-Delaney A12 (variant vs baseline), the one-sided
    Mann-Whitney p-value (variant > baseline), the baseline's final mean count `target`,
    and the speed-up to it (None: the variant's mean curve never reached it)."""

    ratio: float | None
    a12: float
    p_greater: float
    target: float
    speedup: float | None


@dataclass(frozen=True)
class Measure:
    """One count of one variant at the horizon: per seed (in the variant's seed order), its
    mean, min and max, and against the baseline (None for the baseline and for counts
    shown, not compared)."""

    values: list[float]
    mean: float
    low: float
    high: float
    vs_baseline: Comparison | None = None


@dataclass(frozen=True)
class TimeToEvent:
    """When an event (the first bug bundle, a seeded bug's first firing) happened in each of
    a variant's runs (None: not by the horizon), the censored median, and the baseline's
    median / this variant's with what the number is (median_ratio); against the baseline
    (None for the baseline itself), Â12 that a run of the variant has it sooner than a run
    of the baseline and the one-sided Mann-Whitney p of "sooner" (`sooner_than`)."""

    per_seed: list[float | None]
    median: CensoredMedian
    ratio: float | None
    ratio_bound: str
    a12_sooner: float | None = None
    p_sooner: float | None = None


@dataclass(frozen=True)
class RunSummary:
    """One run's raw values (times in seconds from its start, not cut at the horizon),
    beside the per-seed values of the measures."""

    seed: int
    directory: str
    final_time_s: float
    final_steps: int
    abstraction: str
    threshold: float
    bend: Bend
    first_bug_s: float | None
    seeded_fires: Mapping[str, float]
    seeded_found: Mapping[str, float]
    waypoints_reached: Mapping[str, int]


@dataclass(frozen=True)
class VariantResult:
    """Everything measured of one variant on one SUT."""

    name: str
    seeds: list[int]
    runs: list[RunSummary]
    #: axis ("time", "step") -> count name -> its measure (None: n/a, a run lacks the column)
    axes: dict[str, dict[str, Measure | None]]
    bend: Bend
    first_bug: TimeToEvent
    #: seeded bug label -> when it first fired
    seeded_bugs: dict[str, TimeToEvent]
    #: seeded bug label -> when a bug bundle first came of a schedule where it fired
    seeded_found: dict[str, TimeToEvent]
    #: waypoint name -> schedules that reached it, summed over the runs
    waypoints_reached: dict[str, int]


@dataclass(frozen=True)
class SutResult:
    """The evaluation on one SUT: the common horizons, which runs set them, and the variants
    (the baseline first)."""

    name: str
    baseline: str
    horizon_s: float
    shortest_run: str
    horizon_steps: int
    fewest_steps_run: str
    variants: dict[str, VariantResult]


def measure(values: Sequence[float], vs_baseline: Comparison | None = None) -> Measure:
    """A Measure of per-seed values."""
    summary = spread(values)
    return Measure(list(values), summary.mean, summary.low, summary.high, vs_baseline)


def compare(values: Sequence[float], baseline_values: Sequence[float], mean: Curve, baseline_mean: Curve) -> Comparison:
    """A variant's per-seed counts and mean curve against the baseline's."""
    baseline_average = sum(baseline_values) / len(baseline_values)
    ratio = sum(values) / len(values) / baseline_average if baseline_average else None
    return Comparison(ratio, vargha_delaney_a12(values, baseline_values), mann_whitney_greater(values, baseline_values),
                      baseline_mean[-1][1], speedup(baseline_mean, mean))


def axis_measures(runs_by_variant: Mapping[str, Sequence[Run]], baseline: str, axis: str,
                  horizon: float) -> dict[str, dict[str, Measure | None]]:
    """Per variant, the measures of one axis at its horizon: the compared counts (against
    the baseline's) and the shown ones. A count some run did not write is None for all."""
    out: dict[str, dict[str, Measure | None]] = {name: {} for name in runs_by_variant}
    for count, column in {**COMPARED, **SHOWN[axis]}.items():
        curves = {name: [curve_of(run.plot, AXES[axis], column) for run in runs] for name, runs in runs_by_variant.items()}
        if any(curve is None for runs in curves.values() for curve in runs):
            for name in runs_by_variant:
                out[name][count] = None
            continue
        finals = {name: [value_at(curve, horizon) for curve in runs] for name, runs in curves.items()}
        means = {name: mean_curve(runs, horizon) for name, runs in curves.items()}
        for name in runs_by_variant:
            versus = None
            if count in COMPARED and name != baseline:
                versus = compare(finals[name], finals[baseline], means[name], means[baseline])
            out[name][count] = measure(finals[name], versus)
    return out


def sooner_than(times: Sequence[float | None], baseline_times: Sequence[float | None]) -> tuple[float, float]:
    """Â12 that a run of `times` has the event sooner than a run of `baseline_times`, and the
    one-sided Mann-Whitney p of "sooner"; a run without the event (None) ranks after every
    run with it, and ties with the others without it."""
    def rank(values: Sequence[float | None]) -> list[float]:
        return [-math.inf if t is None else -t for t in values]  # sooner = larger

    return vargha_delaney_a12(rank(times), rank(baseline_times)), mann_whitney_greater(rank(times), rank(baseline_times))


def times_to_event(times: Mapping[str, Sequence[float | None]], horizon: float, baseline: str) -> dict[str, TimeToEvent]:
    """Per variant, its runs' times to one event (None: never) up to the horizon, against
    the baseline's."""
    medians = {name: censored_median(runs, horizon) for name, runs in times.items()}
    cut = {name: [by_horizon(t, horizon) for t in runs] for name, runs in times.items()}
    return {name: TimeToEvent(cut[name], medians[name], *median_ratio(medians[baseline], medians[name]),
                              *((None, None) if name == baseline else sooner_than(cut[name], cut[baseline])))
            for name in times}


def summarize_run(run: Run, horizon_s: float) -> RunSummary:
    """A run's raw values and its state curve's bend over the horizon."""
    return RunSummary(run.seed, str(run.root), run.plot[-1].time_s, run.plot[-1].steps_done, run.abstraction,
                      run.threshold, bend(curve_of(run.plot, "time_s", "distinct_states"), horizon_s),
                      time_to_reach(curve_of(run.plot, "time_s", "bugs"), 1), dict(run.seeded_fires),
                      dict(run.seeded_found), dict(run.waypoints_reached))


def analyze_sut(name: str, runs: Sequence[Run], baseline: str, seeded_bugs: Sequence[str]) -> SutResult:
    """The evaluation of one SUT's runs against the `baseline` variant's; MalloryError if it
    has none."""
    runs_by_variant: dict[str, list[Run]] = {}
    for run in runs:
        runs_by_variant.setdefault(run.variant, []).append(run)
    if baseline not in runs_by_variant:
        raise MalloryError(f"{name}: no runs of the baseline variant {baseline!r} (variants: {', '.join(runs_by_variant)})")
    runs_by_variant = {baseline: runs_by_variant.pop(baseline), **runs_by_variant}
    shortest = min(runs, key=lambda run: run.plot[-1].time_s)
    fewest = min(runs, key=lambda run: run.plot[-1].steps_done)
    horizon_s, horizon_steps = shortest.plot[-1].time_s, fewest.plot[-1].steps_done
    by_axis = {axis: axis_measures(runs_by_variant, baseline, axis, horizon)
               for axis, horizon in (("time", horizon_s), ("step", horizon_steps))}
    summaries = {variant: [summarize_run(run, horizon_s) for run in variant_runs]
                 for variant, variant_runs in runs_by_variant.items()}
    first_bug = times_to_event({v: [s.first_bug_s for s in runs] for v, runs in summaries.items()}, horizon_s, baseline)
    seeded = {label: times_to_event({v: [s.seeded_fires.get(label) for s in runs] for v, runs in summaries.items()},
                                    horizon_s, baseline)
              for label in seeded_bugs}
    found = {label: times_to_event({v: [s.seeded_found.get(label) for s in runs] for v, runs in summaries.items()},
                                   horizon_s, baseline)
             for label in seeded_bugs}
    variants = {}
    for variant, runs_summaries in summaries.items():
        waypoints: dict[str, int] = {}
        for summary in runs_summaries:
            for waypoint, count in summary.waypoints_reached.items():
                waypoints[waypoint] = waypoints.get(waypoint, 0) + count
        variants[variant] = VariantResult(
            name=variant,
            seeds=[summary.seed for summary in runs_summaries],
            runs=runs_summaries,
            axes={axis: measures[variant] for axis, measures in by_axis.items()},
            bend=mean_bend([summary.bend for summary in runs_summaries]),
            first_bug=first_bug[variant],
            seeded_bugs={label: by_variant[variant] for label, by_variant in seeded.items()},
            seeded_found={label: by_variant[variant] for label, by_variant in found.items()},
            waypoints_reached=waypoints,
        )
    return SutResult(name, baseline, horizon_s, shortest.root.name, horizon_steps, fewest.root.name, variants)


def analyze(runs: Sequence[Run], baseline: str) -> list[SutResult]:
    """The evaluation of each SUT's runs (SUTs by name, runs by variant then seed), with the
    seeded bugs its runs were timed for; MalloryError if they were not all timed for the same."""
    by_sut: dict[str, list[Run]] = {}
    for run in runs:
        by_sut.setdefault(run.sut, []).append(run)
    results = []
    for sut in sorted(by_sut):
        sut_runs = sorted(by_sut[sut], key=lambda run: (run.variant, run.seed))
        timed = sorted({run.seeded_bugs for run in sut_runs})
        if len(timed) > 1:
            raise MalloryError(f"{sut}: its runs were timed for different seeded bugs: "
                               + " vs ".join(f"[{', '.join(labels)}]" for labels in timed))
        results.append(analyze_sut(sut, sut_runs, baseline, timed[0]))
    return results


# -- output -----------------------------------------------------------------------------------

#: how each count is called in the tables
COUNT_LABELS = {"states": "distinct states", "pairs": "pairs covered", "steps": "steps done",
                "schedules": "schedules done", "seconds": "wall time (s)"}
#: how a ratio's bound (median_ratio) is shown before it
BOUND_SIGNS = {"=": "", ">=": "≥", "<=": "≤"}

#: a table row: (label, one cell per variant), or (section title, None)
Row = tuple[str, list[str] | None]


def format_measure(m: Measure | None) -> str:
    """"mean (min–max)", or "n/a" when a campaign did not write the count."""
    return "n/a" if m is None else f"{m.mean:.1f} ({m.low:.0f}–{m.high:.0f})"


def format_test(m: Measure | None) -> str:
    """"ratio / Â12 / p" against the baseline; "—" for the baseline itself."""
    if m is None:
        return "n/a"
    c = m.vs_baseline
    if c is None:
        return "—"
    ratio = "n/a" if c.ratio is None else f"{c.ratio:.2f}x"
    return f"{ratio} / {c.a12:.2f} / {c.p_greater:.3f}"


def format_speedup(m: Measure | None) -> str:
    """The speed-up to the baseline's final mean: "—" for the baseline, "never" when the
    variant's mean never reached it, "n/a" when there is nothing to reach (0)."""
    if m is None:
        return "n/a"
    c = m.vs_baseline
    if c is None:
        return "—"
    if c.target <= 0:
        return "n/a"
    return "never" if c.speedup is None else f"{c.speedup:.2f}x"


def format_time(t: float | None) -> str:
    """Seconds rounded, "–" for not by the horizon."""
    return "–" if t is None else f"{t:.0f}"


def format_median(m: CensoredMedian) -> str:
    """"median (happened/runs)", "≥" before a censored median (a lower bound)."""
    return f"{'≥' if m.lower_bound else ''}{m.value:.0f} ({m.happened}/{m.runs})"


def format_ratio(event: TimeToEvent, is_baseline: bool) -> str:
    """baseline median / variant median with its bound; "—" for the baseline."""
    if is_baseline:
        return "—"
    return "n/a" if event.ratio is None else f"{BOUND_SIGNS[event.ratio_bound]}{event.ratio:.2f}x"


def format_sooner(event: TimeToEvent) -> str:
    """"Â12 / p" of "sooner than the baseline"; "—" for the baseline."""
    return "—" if event.a12_sooner is None else f"{event.a12_sooner:.2f} / {event.p_sooner:.3f}"


def format_table(rows: Sequence[Row], columns: Sequence[str]) -> list[str]:
    """Aligned lines: the column names, then each row's label (indented) and cells, or a
    section's title."""
    cells = [row_cells for _, row_cells in rows if row_cells is not None]
    label_width = 2 + max(len(label) for label, row_cells in rows if row_cells is not None)
    widths = [max(len(column), *(len(row_cells[i]) for row_cells in cells)) for i, column in enumerate(columns)]
    lines = [" " * label_width + "".join(f"  {c:>{w}}" for c, w in zip(columns, widths))]
    for label, row_cells in rows:
        if row_cells is None:
            lines.append(label)
        else:
            lines.append(f"  {label:<{label_width - 2}}" + "".join(f"  {c:>{w}}" for c, w in zip(row_cells, widths)))
    return lines


def render_sut(result: SutResult) -> str:
    """The text report of one SUT: what was run, the horizons, a table with a column per
    variant, and the waypoints reached."""
    variants = list(result.variants.values())
    baseline = result.baseline

    def row(label: str, cell: Callable[[VariantResult], str]) -> Row:
        """A table row: the label, and `cell` of each variant."""
        return label, [cell(v) for v in variants]

    def yardstick(v: VariantResult) -> str:
        """How the variant's runs counted states: abstraction(s), threshold or its range."""
        thresholds = sorted({r.threshold for r in v.runs})
        shown = f"{thresholds[0]:.2f}" + (f"–{thresholds[-1]:.2f}" if len(thresholds) > 1 else "")
        return f"{'/'.join(sorted({r.abstraction for r in v.runs}))} {shown}"

    rows: list[Row] = [row("seeds", lambda v: " ".join(map(str, v.seeds))),
                       row("state abstraction, threshold", yardstick)]
    for axis, title in (("time", f"per wall-clock time, at {result.horizon_s:.0f} s"),
                        ("step", f"per step, at {result.horizon_steps} steps")):
        rows.append((title, None))
        rows += [row(COUNT_LABELS[count], lambda v: format_measure(v.axes[axis][count]))
                 for count in (*COMPARED, *SHOWN[axis])]
        rows += [row(f"{count}: ratio / Â12 / p, vs {baseline}", lambda v: format_test(v.axes[axis][count]))
                 for count in COMPARED]
        for count in COMPARED:
            final = result.variants[baseline].axes[axis][count]
            rows.append(row(f"{count}: speed-up to {baseline}'s {'n/a' if final is None else f'{final.mean:.1f}'}",
                            lambda v: format_speedup(v.axes[axis][count])))
        if axis == "time":
            rows.append(row("new states/h, first → last third", lambda v: (
                f"{v.bend.first_third_per_h:.0f} → {v.bend.last_third_per_h:.0f} "
                f"({'bends' if v.bend.bends else 'no bend'})")))
    rows.append((f"time to bug (s), by {result.horizon_s:.0f} s", None))
    events = [("first bug bundle", "found", lambda v: v.first_bug)]
    for label in result.variants[baseline].seeded_bugs:
        events += [(f"{label} fired", "fired", lambda v, label=label: v.seeded_bugs[label]),
                   (f"{label} found (a bundle of a schedule where it fired)", "found",
                    lambda v, label=label: v.seeded_found[label])]
    for what, happened, event in events:
        rows += [row(f"{what}: per seed", lambda v: " ".join(map(format_time, event(v).per_seed))),
                 row(f"{what}: median ({happened}/seeds)", lambda v: format_median(event(v).median)),
                 row(f"{what}: {baseline}'s median / variant's", lambda v: format_ratio(event(v), v.name == baseline)),
                 row(f"{what}: Â12 / p, sooner than {baseline}", lambda v: format_sooner(event(v)))]
    seeds = ", ".join(f"{v.name} {' '.join(map(str, v.seeds))}" for v in variants)
    lines = [f"== {result.name}: seeds {seeds}; baseline {baseline}",
             f"common horizon: {result.horizon_s:.0f} s of wall time (the shortest campaign: {result.shortest_run}), "
             f"{result.horizon_steps} steps (the fewest: {result.fewest_steps_run})",
             *format_table(rows, [v.name for v in variants]),
             "waypoints reached (schedules, summed over seeds, at each campaign's end)"]
    for v in variants:
        lines.append(f"  {v.name}: {', '.join(f'{n}:{c}' for n, c in v.waypoints_reached.items()) or '-'}")
    return "\n".join(lines)


def write_json(results: Sequence[SutResult], baseline: str, path: Path) -> None:
    """Every number of the report and every run's raw values, as JSON (the closing note's
    source): {"baseline": ..., "suts": {name: SutResult as an object}}."""
    document = {"baseline": baseline, "suts": {result.name: asdict(result) for result in results}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


# -- command line -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The bench's options; the variants end up in `args.variants` (name -> arguments), the
    defaults when none is given. Exits on a bad option (argparse)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", type=parse_variant, action="append", metavar="NAME=ARGS",
                        help="a variant: extra `mallory fuzz` arguments, one shell-quoted string (repeatable; "
                        "replaces --variants)")
    parser.add_argument("--variants", choices=sorted(VARIANT_SETS), default="guidance",
                        help="a named set of variants: guidance ("
                        f"{' '.join(f'{n}={shlex.join(a)!r}' for n, a in DEFAULT_VARIANTS.items())}; the default) or "
                        f"rounds ({' '.join(f'{n}={shlex.join(a)!r}' for n, a in ROUND_VARIANTS.items())})")
    parser.add_argument("--sut", type=sut_target, action="append", metavar="NAME|SPEC",
                        help=f"an SUT: {', '.join(KNOWN_SUTS)}, or a spec file (repeatable; default example)")
    parser.add_argument("--workload", default=None, help="the workload of every SUT (default: the SUT's own)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--duration", default="20m", help="per campaign (default %(default)s)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--faults", default=None, help="fault families or labels (default: all the SUT can take)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="run all variants of one (SUT, seed) at the same time")
    parser.add_argument("--out", type=Path, default=None, help="keep the campaigns in DIR/<sut>/<variant>-<seed>/")
    parser.add_argument("--baseline", default="random", help="the variant the others are compared with (default %(default)s)")
    parser.add_argument("--analyze", type=Path, nargs="+", action="extend", metavar="PATH",
                        help="run nothing: analyze the runs of campaign roots (DIR/<sut>/<variant>-<seed>/) and saved-runs "
                        "files (--save-runs), together (repeatable)")
    parser.add_argument("--save-runs", type=Path, metavar="FILE",
                        help="write every run analyzed, as the analysis reads it, to FILE (JSON; see bench/results/)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every number, and every run's, as JSON")
    args = parser.parse_args(argv)
    args.sut = args.sut or [KNOWN_SUTS["example"]]
    variants = dict(VARIANT_SETS[args.variants])
    if args.variant:
        variants = {}
        for name, extra in args.variant:
            if name in variants:
                parser.error(f"--variant {name} given twice")
            variants[name] = extra
    args.variants = variants
    if not args.analyze and args.baseline not in variants:
        parser.error(f"--baseline {args.baseline} is not a variant ({', '.join(variants)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaigns (unless --analyze), save their runs (--save-runs: before analyzing,
    so that a failing analysis loses none), then print the report per SUT; 1 when an SUT
    cannot be built or a campaign directory or saved-runs file cannot be analyzed, saying why."""
    args = parse_args(argv)
    try:
        paths = args.analyze
        if paths is None:
            root = (args.out or Path(tempfile.mkdtemp(prefix="mallory-policies-"))).resolve()
            print(f"campaigns in {root} (re-analyze: {Path(__file__).name} --analyze {root})", flush=True)
            run_campaigns(args, root)
            paths = [root]
        runs = gather_runs(paths)
        if args.save_runs:
            save_runs(runs, args.save_runs, provenance(sys.argv[1:] if argv is None else argv))
            print(f"{len(runs)} runs saved in {args.save_runs}", flush=True)
        results = analyze([sourced.run for sourced in runs], args.baseline)
    except MalloryError as exc:
        print(f"{Path(__file__).name}: {exc}", file=sys.stderr)
        return 1
    print("\n\n".join(render_sut(result) for result in results))
    if args.json:
        write_json(results, args.baseline, args.json)
        print(f"\nevery number as JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
