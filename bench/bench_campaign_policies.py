"""The headline: qlearning against random (the Jepsen baseline) on the same SUT, the same
faults, the same wall time, several seeds each. Runs real `mallory fuzz` campaigns (root:
network namespaces) one after the other and prints, from their plot_data:

  - distinct states at the end per run, mean per policy, and the ratio qlearning / random;
  - Vargha-Delaney A12 of the final counts (P[qlearning run > random run] + ties / 2);
  - the speed-up: the time random took to reach its final (mean) count, divided by the time
    qlearning took to reach the same count (from the mean curves);
  - time to first bug per run, where there was one.

    .venv/bin/python bench/bench_campaign_policies.py --duration 5m --seeds 1 2 [--sut SPEC] [--side-by-side] [--prior optimistic]

--side-by-side runs a seed's two campaigns at the same time (the same machine load for
both, half the wall time) instead of one after the other.

The paper reports 1.54x the states of Jepsen and a 2.24x speed-up over 24 h; the target here
is >= 1.5x states on 1-hour runs. Short runs are noisier and favour neither policy much.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from mallory.harness.sut_make import make_with_mallory_cc  # noqa: E402
EXAMPLE_SPEC = REPO / "suts" / "example" / "example.toml"


def curve(plot_data: Path) -> list[tuple[float, int, int]]:
    """(relative time s, distinct states, bugs) per step."""
    rows = []
    for line in plot_data.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        rows.append((float(cols[0]), int(cols[3]), int(cols[4])))
    return rows


def states_at(rows: list[tuple[float, int, int]], t: float) -> int:
    best = 0
    for time_s, states, _ in rows:
        if time_s > t:
            break
        best = states
    return best


def time_to_reach(mean_curve: list[tuple[float, float]], count: float) -> float | None:
    for t, value in mean_curve:
        if value >= count:
            return t
    return None


def a12(xs: list[float], ys: list[float]) -> float:
    wins = sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)
    return wins / (len(xs) * len(ys))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="5m")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sut", default=str(EXAMPLE_SPEC))
    parser.add_argument("--nodes", default="3")
    parser.add_argument("--faults", default=None)
    parser.add_argument("--workload", default="register")
    parser.add_argument("--out", type=Path, default=None, help="keep the campaign directories here")
    parser.add_argument("--side-by-side", action="store_true", help="run a seed's two campaigns at the same time")
    parser.add_argument("--prior", default=None, help="qlearning's prior (see `mallory fuzz --prior`)")
    args = parser.parse_args()

    if Path(args.sut) == EXAMPLE_SPEC:  # its spec runs build/example-sut: never a stale one
        make_with_mallory_cc(EXAMPLE_SPEC.parent, None, "the example SUT")
    root = args.out or Path(tempfile.mkdtemp(prefix="mallory-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[list[tuple[float, int, int]]]] = {"qlearning": [], "random": []}
    for seed in args.seeds:
        batches = [("qlearning", "random")] if args.side_by_side else [("qlearning",), ("random",)]
        for batch in batches:
            started = {}
            for policy in batch:
                out = root / f"{policy}-{seed}"
                argv = [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--sut", args.sut, "--nodes", args.nodes,
                        "--duration", args.duration, "--policy", policy, "--seed", str(seed), "--out", str(out),
                        "--workload", args.workload]
                if args.faults:
                    argv += ["--faults", args.faults]
                if args.prior and policy == "qlearning":
                    argv += ["--prior", args.prior]
                print(f"== {policy} seed {seed}: {out}", flush=True)
                log = open(root / f"{policy}-{seed}.log", "w")
                started[policy] = (out, log, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True))
            for policy, (out, log, proc) in started.items():
                code = proc.wait()
                log.close()
                output = (root / f"{policy}-{seed}.log").read_text().strip()
                if code != 0:
                    sys.exit(f"{policy} seed {seed}: campaign failed:\n{output[-3000:]}")
                print(f"{policy} seed {seed}: {output.splitlines()[-1] if output else ''}", flush=True)
                runs[policy].append(curve(out / "plot_data"))

    horizon = min(rows[-1][0] for rs in runs.values() for rows in rs)
    grid = [horizon * i / 200 for i in range(201)]
    mean = {p: [(t, sum(states_at(rows, t) for rows in rs) / len(rs)) for t in grid] for p, rs in runs.items()}
    final = {p: [states_at(rows, horizon) for rows in rs] for p, rs in runs.items()}
    print(f"\nsame wall time for all runs: {horizon:.0f} s, seeds {args.seeds}")
    for p in ("qlearning", "random"):
        print(f"{p:>10}: final distinct states {final[p]} (mean {sum(final[p]) / len(final[p]):.1f})")
    q_mean = sum(final["qlearning"]) / len(final["qlearning"])
    r_mean = sum(final["random"]) / len(final["random"])
    print(f"ratio of distinct states qlearning / random: {q_mean / max(r_mean, 1e-9):.2f} (target >= 1.5 on 1 h runs)")
    print(f"Vargha-Delaney A12 (qlearning > random): {a12(final['qlearning'], final['random']):.2f}")
    t_random = time_to_reach(mean["random"], r_mean)
    t_q = time_to_reach(mean["qlearning"], r_mean)
    if t_random is not None and t_q:
        print(f"speed-up to random's final count ({r_mean:.1f}): {t_random:.0f} s / {t_q:.0f} s = {t_random / t_q:.2f}x")
    else:
        print(f"speed-up: qlearning never reached random's final count ({r_mean:.1f})")
    for p, rs in runs.items():
        firsts = [next((t for t, _, bugs in rows if bugs > 0), None) for rows in rs]
        print(f"{p:>10}: time to first bug (s) per seed: {[None if f is None else round(f) for f in firsts]}")


if __name__ == "__main__":
    main()
