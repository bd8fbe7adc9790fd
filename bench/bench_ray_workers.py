"""States per hour with 1 and with 2 Ray workers (`mallory fuzz --workers N`), the decision
latency the learner actor adds (p50/p99 over every step of every worker) and the learner
actor's resident memory at the end: real campaigns (root: network namespaces, Ray
installed: `pip install 'mallory[ray]'`) on the example SUT, one after the other, each
starting its own local Ray, plus the single-process campaign (no Ray) as the baseline.

    sudo .venv/bin/python bench/bench_ray_workers.py --duration 1h --nodes 2 --seed 1

Prints one line per campaign, then the ratio of states per hour (2 workers / 1 worker) and
of steps per hour: on one machine the ratio is bounded by its cores (each worker's cluster,
observers and mediator compete for them; a step's window is wall time, so a worker that
gets less CPU gets late windows, not shorter ones) and by how much the two workers'
states overlap (one store: a state both meet counts once). With --duration 1h the learner's
memory is "after an hour". Every campaign's directory is kept under --keep DIR when given.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUT_DIR = REPO / "suts" / "example"
SPEC = SUT_DIR / "example.toml"

sys.path.insert(0, str(REPO))
from mallory.campaign.directory import CampaignDir  # noqa: E402


def build() -> Path:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(["make", "-s", "-C", str(SUT_DIR)], check=True, env=env)
    return SUT_DIR / "build" / "example-sut"


def campaign(out: Path, workers: int | None, args: argparse.Namespace) -> dict[str, str]:
    """Run one campaign; its merged fuzzer_stats."""
    argv = [
        sys.executable, "-m", "mallory.cli", "fuzz", "--sut", str(SPEC), "--workload", "register",
        "--nodes", str(args.nodes), "--duration", args.duration, "--seed", str(args.seed),
        "--faults", args.faults, "--out", str(out), "--plain",
        *(["--workers", str(workers)] if workers else []),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):  # 1: it found a bug, which is fine here
        raise SystemExit(f"campaign {out} failed ({done.returncode}):\n{done.stdout}")
    return CampaignDir(out).read_stats()


def per_hour(stats: dict[str, str], key: str) -> float:
    return float(stats[key]) / max(float(stats["run_time"]), 1.0) * 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="10m", help="each campaign's duration (default %(default)s)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of each worker's cluster (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default="partition,kill,pause,delay")
    parser.add_argument("--no-baseline", action="store_true", help="skip the single-process campaign")
    parser.add_argument("--keep", type=Path, default=None, help="keep the campaign directories here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    build()
    keep = args.keep or Path(tempfile.mkdtemp(prefix="bench-ray-"))
    runs = [("no ray", None)] * (not args.no_baseline) + [("1 worker", 1), ("2 workers", 2)]
    results = {}
    print(f"example SUT x{args.nodes}, {args.duration} each, seed {args.seed}, {os.cpu_count()} cores; dirs in {keep}")
    for name, workers in runs:
        stats = campaign(keep / name.replace(" ", "-"), workers, args)
        results[name] = stats
        print(f"{name:>9}: {stats['distinct_states']:>5} states  {per_hour(stats, 'distinct_states'):7.1f} states/h  "
              f"{per_hour(stats, 'steps_done'):7.1f} steps/h  {stats['late_steps']:>4} late  "
              f"decision p50 {stats.get('decision_ms_p50', '-')} ms p99 {stats.get('decision_ms_p99', '-')} ms  "
              f"{stats.get('fallback_decisions', '0')} fallbacks  learner RSS {stats.get('learner_rss_mb', '-')} MiB",
              flush=True)
    one, two = results["1 worker"], results["2 workers"]
    ratios = [per_hour(two, key) / max(per_hour(one, key), 1e-9) for key in ("distinct_states", "steps_done")]
    print(f"2 workers / 1 worker: states/h x{ratios[0]:.2f}, steps/h x{ratios[1]:.2f}")

if __name__ == "__main__":
    main()
