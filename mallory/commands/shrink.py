"""`mallory shrink BUNDLE`: the shortest, weakest fault schedule that still brings the bug back.

Delta debugging over the bundle's schedule: drop faults (ddmin), then shorten the windows
between them, then weaken them (fewer nodes, fewer links). Every candidate is replayed on
fresh clusters as `mallory replay` does, up to --replays times, and kept only if the same
bug (same signature) reappears in at least --min-fraction of them: faults on real systems
are not deterministic, so the answer for each candidate is a count, and the output shows
it. Every replay is journaled in OUT.work/journal.jsonl: after Ctrl-C the same command
continues where it stopped, asking nothing twice. The minimal schedule becomes a new bundle
(default BUNDLE/shrunk) with its provenance. Exits 0 with a shrunk bundle, 1 when the bug
did not come back often enough on the whole schedule to shrink against.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from mallory.campaign.directory import read_bundle_config, read_bundle_file
from mallory.campaign.loop import ScriptedStep, script_of
from mallory.errors import ExitCode, MalloryError
from mallory.shrink.bundle import bundle_signature, steps_json, write_shrunk_bundle
from mallory.shrink.fraction import FractionOracle, Verdict
from mallory.shrink.journal import Journal
from mallory.shrink.live_replay import LiveReplay
from mallory.shrink.phases import shrink_schedule

NAME = "shrink"
HELP = "shrink a bug bundle's fault schedule to the faults that matter (ddmin, replayed on fresh clusters)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="a bug bundle: DIR/bugs/<signature>")
    parser.add_argument("--replays", type=int, default=3, help="fresh-cluster replays per candidate at most (default 3)")
    parser.add_argument("--min-fraction", type=float, default=0.5,
                        help="keep a candidate if the bug reappears in at least this fraction of --replays (default 0.5)")
    parser.add_argument("--min-window", type=float, default=0.5, help="shortest window to try after a step, seconds (default 0.5)")
    parser.add_argument("--out", type=Path, default=None, help="the new bundle (default BUNDLE/shrunk)")


def describe(steps: list[ScriptedStep]) -> str:
    return " -> ".join(f"{s.action}({s.window_s:g}s)" for s in steps) or "(no steps)"


def allowed_by(faults: Sequence[str] | None) -> Callable[[str], bool]:
    """Whether a label is among the campaign's enabled faults (families or labels)."""
    if not faults:
        return lambda action: True
    enabled = set(faults)
    return lambda action: action in enabled or action.partition(":")[0] in enabled


def run(args: argparse.Namespace) -> int:
    if args.replays < 1:
        raise MalloryError("--replays must be at least 1")
    if not 0.0 < args.min_fraction <= 1.0:
        raise MalloryError("--min-fraction must be in (0, 1]")
    if args.min_window <= 0:
        raise MalloryError("--min-window must be positive")
    bundle = args.bundle
    config = read_bundle_config(bundle)
    schedule = read_bundle_file(bundle, "schedule.json")
    signature = bundle_signature(bundle)
    try:
        original = [replace(s, window_s=float(s.window_s or config.window_s)) for s in script_of(schedule)]
    except (KeyError, TypeError, ValueError) as exc:
        raise MalloryError(f"{bundle}: the schedule is malformed ({exc})") from None
    if not original:
        raise MalloryError(f"{bundle}/schedule.json has no steps to shrink")
    out = args.out or bundle / "shrunk"
    work = out.with_name(out.name + ".work")
    journal = Journal(work / "journal.jsonl")

    print(f"shrinking {signature}: {len(original)} steps of schedule {schedule.get('index')}: {describe(original)}")
    if len(journal):
        print(f"continuing from {journal.path} ({len(journal)} replays already answered)")
    asked = [0]

    def show(candidate: list[ScriptedStep], verdict: Verdict) -> None:
        asked[0] += 1
        source = f", {verdict.journaled} from the journal" if verdict.journaled else ""
        print(f"  candidate {asked[0]}: {describe(candidate)}: reappeared {verdict.hits}/{verdict.replays} "
              f"(needed {verdict.needed}/{args.replays}{source}) -> {'kept' if verdict.fails else 'rejected'}", flush=True)

    oracle = FractionOracle(LiveReplay(config, schedule.get("seed"), signature, work), journal, args.replays,
                            args.min_fraction, on_verdict=show)
    print(f"faults on real systems are not deterministic: each candidate is replayed on a fresh cluster up to "
          f"{args.replays} times and kept only if the bug reappears in at least {oracle.needed} of them")
    try:
        baseline = oracle.verdict(original)
        if not baseline.fails:
            print(f"the bug reappeared in {baseline.hits}/{baseline.replays} replays of the whole schedule, fewer than needed: "
                  "nothing to shrink against (try more --replays or a lower --min-fraction)")
            return ExitCode.FAILED
        minimal = shrink_schedule(original, oracle, floor_s=args.min_window, allowed=allowed_by(config.faults),
                                  on_phase=lambda name, steps: print(f"after {name}: {len(steps)} steps: {describe(steps)}"))
    except KeyboardInterrupt:
        print(f"interrupted: every answered replay is in {journal.path}; run the same command to continue")
        raise
    final = oracle.recorded(minimal)  # it was asked when it was kept
    hit = next(a for a in journal.answers(minimal) if a["hit"])
    written = write_shrunk_bundle(out, Path(hit["dir"]), signature, {
        "shrunk_from": str(bundle.resolve()),
        "original_steps": steps_json(original),
        "steps": steps_json(minimal),
        "replays": args.replays,
        "min_fraction": args.min_fraction,
        "reappeared": [final.hits, final.replays],
        "live_replays": oracle.asked,  # by this run; the journal holds those of interrupted runs too
        "journaled_replays": len(journal),
        "journal": str(journal.path.resolve()),
    })
    print(f"{signature}: {len(original)} steps -> {len(minimal)}: {describe(minimal)} "
          f"(reappeared {final.hits}/{final.replays}; {oracle.asked} live replays)")
    print(f"minimal bundle: {written}")
    return ExitCode.OK
