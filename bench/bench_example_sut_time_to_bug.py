"""Time to each seeded bug of the example SUT, qlearning against random (the Jepsen-style
baseline), measured in the same run: real `mallory fuzz` campaigns (root: network
namespaces) on suts/example/example-bugs.toml, one after the other, then from each
campaign's recording and bug bundles:

  - when each seeded bug first fired (its annotation, `sticky-leader-kept-term` or
    `stall-catchup-applied`, as a code event in the mediator's recording), in seconds from
    the campaign's start, and how many schedules had it fire;
  - the oracle findings (bug bundles) and when each was first seen;
  - per bug, the ratio random / qlearning of the time to first fire (> 1: qlearning faster).

    .venv/bin/python bench/bench_example_sut_time_to_bug.py --duration 4m --seed 1

Every campaign's directory is kept under --keep DIR when given. Numbers from short runs
are noisy (one seed, a shared 2-core machine); compare ratios, not absolute seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUT_DIR = REPO / "suts" / "example"
SPEC = SUT_DIR / "example-bugs.toml"
BUGS = ("sticky-leader-kept-term", "stall-catchup-applied")

sys.path.insert(0, str(REPO))
from mallory.instrument.catalogue import Catalogue, catalogue_path  # noqa: E402
from mallory.timeline.codec import read_records  # noqa: E402
from mallory.timeline.event import Batch, ClockPair, Kind  # noqa: E402


def build() -> Path:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(["make", "-s", "-C", str(SUT_DIR)], check=True, env=env)
    return SUT_DIR / "build" / "example-sut"


def campaign(policy: str, duration: str, seed: int, faults: str, out: Path) -> None:
    argv = [
        sys.executable, "-m", "mallory.cli", "fuzz", "--sut", str(SPEC), "--workload", "register",
        "--policy", policy, "--duration", duration, "--seed", str(seed), "--faults", faults,
        "--out", str(out), "--plain",
    ]  # fmt: skip
    subprocess.run(argv, check=True, cwd=REPO, stdout=subprocess.DEVNULL)


def first_fires(out: Path, ids: dict[int, str]) -> dict[str, float]:
    """Seconds from the campaign's start to the first code event of each seeded bug."""
    start_s = float(_stats(out)["start_time"])
    clocks: dict[str, ClockPair] = {}
    first: dict[str, float] = {}
    for path in sorted((out / "events").glob("*.jsonl")):
        with open(path, "rb") as f:
            for record in read_records(f):
                if isinstance(record, ClockPair):
                    clocks[record.node] = record
                elif isinstance(record, Batch) and record.node in clocks:
                    for e in record.events:
                        name = ids.get(e.id) if e.kind in (Kind.FUNC, Kind.BLOCK) else None
                        if name is not None:
                            t = clocks[record.node].to_real(e.ts) / 1e9 - start_s
                            first[name] = min(first.get(name, t), t)
    return first


def schedules_with(out: Path, text: str) -> int:
    """Schedules whose node logs show the bug's own log line."""
    return sum(1 for run in (out / "runs").iterdir() if any(text in p.read_text(errors="replace") for p in run.glob("logs/*.log")))


def findings(out: Path) -> list[tuple[str, float]]:
    """(oracle/kind: message, first seen in s from start) per bug bundle."""
    rows = []
    start_s = float(_stats(out)["start_time"])
    for bundle in sorted((out / "bugs").iterdir()) if (out / "bugs").is_dir() else []:
        report = json.loads((bundle / "report.json").read_text())
        record = json.loads((bundle / "schedule.json").read_text())
        rows.append((f"{report['oracle']}/{report['kind']}: {report['message'][:60]}", record["started_ns"] / 1e9 - start_s))
    return rows


def _stats(out: Path) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in (out / "fuzzer_stats").read_text().splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="4m", help="per campaign (default 4m)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default="partition,kill,pause", help="fault families (default partition,kill,pause)")
    parser.add_argument("--keep", type=Path, help="keep the campaign directories here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_example_sut_time_to_bug: needs root (network namespaces)", file=sys.stderr)
        return 2
    catalogue = Catalogue.load(catalogue_path(build()))
    ids = {e.id: e.label for e in catalogue if e.label in BUGS}
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-ttb-"))
    results = {}
    for policy in ("random", "qlearning"):
        out = root / f"{policy}-{args.seed}"
        campaign(policy, args.duration, args.seed, args.faults, out)
        stats = _stats(out)
        results[policy] = first_fires(out, ids)
        print(f"== {policy}: {stats['schedules_done']} schedules, {stats['distinct_states']} states, {out}")
        for name, text in zip(BUGS, ("kept leadership into a higher term", "caught up after a stall")):
            fired = results[policy].get(name)
            when = f"first at {fired:6.1f} s" if fired is not None else "never      "
            print(f"   {name:24} {when}, in {schedules_with(out, text)} schedule(s)")
        for what, t in findings(out):
            print(f"   finding in the schedule starting at {t:6.1f} s: {what}")
    print("== time to first fire, random / qlearning (> 1: qlearning faster)")
    for name in BUGS:
        r, q = results["random"].get(name), results["qlearning"].get(name)
        ratio = f"{r / q:.2f}" if r is not None and q is not None and q > 0 else "n/a (not fired by both)"
        print(f"   {name:24} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
