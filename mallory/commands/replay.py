"""`mallory replay BUNDLE`: re-enact a bug's fault schedule on a fresh cluster, K times.

The bundle (a campaign's `bugs/<signature>/`) holds the schedule (its actions and seed), the
campaign's configuration and the bug's signature. Each attempt brings up a fresh observed
cluster, starts the SUT and the workload, takes the recorded actions in order with the same
window length (the schedule's seed makes each fault pick the same targets where the cluster
lets it), resets, and runs the same checks. Faults on real systems are not deterministic: a
bug that needs a race may not come back every time, which is why there are K attempts and
the answer is a count. Attempts are kept in `BUNDLE/replays/<k>/`. Exits 0 when the bug
came back in at least one attempt, 1 when it came back in none.
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from mallory.campaign.directory import CampaignDir, read_bundle_config, read_bundle_file
from mallory.campaign.live import replay_script
from mallory.campaign.loop import script_of
from mallory.errors import ExitCode, MalloryError
from mallory.shrink.bundle import bundle_signature
from mallory.suts.registry import resolve_sut

NAME = "replay"
HELP = "re-enact a bug bundle's fault schedule on a fresh cluster and say whether the bug came back"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="a bug bundle: DIR/bugs/<signature>")
    parser.add_argument("--attempts", type=int, default=3, help="fresh-cluster attempts (default 3)")


def run(args: argparse.Namespace) -> int:
    if args.attempts < 1:
        raise MalloryError("--attempts must be at least 1")
    bundle = args.bundle
    config = read_bundle_config(bundle)
    schedule = read_bundle_file(bundle, "schedule.json")
    signature = bundle_signature(bundle)
    script = script_of(schedule)
    if not script:
        raise MalloryError(f"{bundle}/schedule.json has no steps to replay")
    resolve_sut(config.sut)  # a moved or broken spec fails here, before any attempt dir
    print(f"replaying {len(script)} steps of schedule {schedule.get('index')}: {' -> '.join(s.action for s in script)}")
    print("(faults on real systems are not deterministic: the answer is a count over attempts)")
    reappeared = 0
    for attempt in range(1, args.attempts + 1):
        directory = CampaignDir(bundle / "replays" / f"{attempt:02d}")
        if (directory.root / "campaign.json").exists():
            raise MalloryError(f"{directory.root} exists: remove {bundle / 'replays'} to replay again")
        record = replay_script(config, directory, "rp" + secrets.token_hex(3), script, schedule.get("seed"))
        found = record.get("findings", [])
        hit = signature in found
        reappeared += hit
        others = sorted(set(found) - {signature})
        gap = "; unobserved (an observer was restarted): its findings do not count" if record.get("unobserved") else ""
        print(f"attempt {attempt}: {'bug reappeared' if hit else 'bug did not reappear'}"
              + (f"; other findings: {', '.join(others)}" if others else "") + gap)
    print(f"{signature}: reappeared in {reappeared}/{args.attempts} attempts")
    return ExitCode.OK if reappeared else ExitCode.FAILED
