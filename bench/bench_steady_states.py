"""Do fault-free windows collapse into few states, and do faults still make new ones?

For each SUT, two real `mallory fuzz` campaigns (root: network namespaces), no calibration:

  steady:  one schedule of 30 `noop` steps under the SUT's workload: 30 fault-free windows;
  faults:  3 schedules of 12 steps chosen at random among every fault the SUT takes.

Every step's window is cut from the campaign's recording (events/events.jsonl) at the
step's own [start, end) and summarised by each abstraction (code-history, the default;
event-history, the paper's), then looked up in a fresh state store at the default
threshold 0.7. Printed per SUT and abstraction:

  - steady: distinct states among the 30 windows, and the share of the windows in the 3
    most visited ones (the issue's target: >= 90% in <= 3 states);
  - faults, per action family: how many steps took it, and how many distinct states the
    windows of those steps fell into that no steady window fell into (a fault that makes
    no new state is invisible to the learner). Faults accumulate within a schedule, so a
    step's window also shows the faults still in force from earlier steps (which is why a
    `noop` step can land in a new state).

    .venv/bin/python bench/bench_steady_states.py [--sut example --sut raft-kv --sut redis-sentinel] [--out DIR]

The windows are the campaign's own, so a state here is what the learner would have seen.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.learner.states import StateStore  # noqa: E402
from mallory.report.recording import read_recording  # noqa: E402
from mallory.timeline.window import summarize  # noqa: E402

#: SUT name -> (the --sut value, its workload)
SUTS = {
    "example": (str(REPO / "suts" / "example" / "example.toml"), "register"),
    "raft-kv": ("raft-kv", "list-append"),
    "redis-sentinel": ("redis-sentinel", "list-append"),
    "etcd": ("etcd", "register"),
}
ABSTRACTIONS = ("code-history", "event-history")
THRESHOLD = 0.7


def run_campaign(out: Path, sut: str, workload: str, *extra: str) -> Path:
    argv = [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--sut", sut, "--workload", workload,
            "--calibrate", "0", "--policy", "random", "--seed", "1", "--reset", "1", "--out", str(out), *extra]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: the campaign found a bug, which is fine here
        sys.exit(f"{out}: campaign failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return out


def step_windows(campaign: Path) -> list[tuple[str, list]]:
    """(action, the window's committed entries) for every complete step, in order."""
    steps = [(s["action"], tuple(s["window_ns"])) for r in CampaignDir(campaign).read_schedules()
             for s in r["steps"] if not s.get("late")]
    recordings = sorted((campaign / "events").glob("events*.jsonl"))
    spans = read_recording(recordings, [span for _, span in steps]).spans
    return [(action, entries) for (action, _), entries in zip(steps, spans)]


def states_of(windows: list[list], abstraction: str, store: StateStore) -> list[int]:
    return [store.lookup(summarize(entries, abstraction)).state_id for entries in windows]


def analyse(steady: Path, faults: Path) -> dict:
    steady_windows = [entries for _, entries in step_windows(steady)]
    fault_steps = step_windows(faults)
    result = {"steady_windows": len(steady_windows)}
    for abstraction in ABSTRACTIONS:
        store = StateStore(threshold=THRESHOLD)
        steady_states = states_of(steady_windows, abstraction, store)
        top3 = sum(n for _, n in Counter(steady_states).most_common(3))
        per_family: dict[str, dict] = {}
        seen_steady = set(steady_states)
        for action, entries in fault_steps:
            family = action.partition(":")[0]
            state = store.lookup(summarize(entries, abstraction)).state_id
            row = per_family.setdefault(family, {"steps": 0, "states": set()})
            row["steps"] += 1
            if state not in seen_steady:
                row["states"].add(state)
        result[abstraction] = {
            "steady_states": len(set(steady_states)),
            "steady_share_in_top3": top3 / max(1, len(steady_states)),
            "families": {f: {"steps": r["steps"], "new_states": len(r["states"])} for f, r in sorted(per_family.items())},
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sut", action="append", choices=sorted(SUTS), help="repeatable (default: example, raft-kv, redis-sentinel)")
    parser.add_argument("--out", type=Path, help="keep the campaigns here")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="mallory-steady-"))
    results = {}
    for name in args.sut or ["example", "raft-kv", "redis-sentinel"]:
        sut, workload = SUTS[name]
        steady = run_campaign(root / name / "steady", sut, workload, "--faults", "noop", "--schedules", "1", "--steps", "30")
        faults = run_campaign(root / name / "faults", sut, workload, "--schedules", "3", "--steps", "12")
        results[name] = analyse(steady, faults)
        r = results[name]
        print(f"== {name}: {r['steady_windows']} fault-free windows under {workload}, threshold {THRESHOLD}")
        for abstraction in ABSTRACTIONS:
            a = r[abstraction]
            target = "meets" if a["steady_share_in_top3"] >= 0.9 else "misses"
            print(f"  {abstraction:14} steady: {a['steady_states']} states, {a['steady_share_in_top3']:.0%} of the "
                  f"windows in the 3 most visited ({target} >= 90% in <= 3)")
            rows = ", ".join(f"{f} {v['new_states']}/{v['steps']}" for f, v in a["families"].items())
            print(f"  {'':14} faults (new states / steps): {rows}")
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"campaigns in {root}")


if __name__ == "__main__":
    main()
