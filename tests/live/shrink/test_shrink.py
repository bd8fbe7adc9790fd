"""`mallory shrink` for real (as root): the example SUT's seeded sticky-leader bug, found by
a schedule padded with irrelevant faults, shrinks to its essential faults.

The bug (suts/example/README.md): partition the leader away, kill the new leader, heal;
the old leader hears the lone survivor's much higher term from a node without a leader,
keeps its leadership, and overwrites the survivor's committed entries (the survivor's
invariant check fails: a log finding). In a Mallory schedule the heal needs no step of
its own: the reset at every schedule's end heals the partition, then restarts the killed
node (a version of this test with an explicit `heal` step saw the shrinker drop it). So
the essential faults are a partition then `kill:one`; the padded schedule's partition is
`partition:majority`, which the shrinker weakens to `partition:one`.

Two things make the bug reproducible enough for one replay per candidate, and the test
sets both up through the SUT's spec and the schedule's seed, not through the shrinker:

* who leads must be predictable: n1 gets the shortest election timeout (it leads first),
  n2 the next (it wins once n1 is cut off), n3 the longest; the seed is chosen so that
  `partition:one` cuts n1 off and `kill:one` kills n2;
* the reset restarts the killed n2 right after it lifts the partition, and the old leader
  must hear the survivor before it hears n2: here n2, when it restarts with a log, waits
  1 s before exec'ing the SUT.

Replays of a real cluster are not deterministic even so: the shrinker's verdicts are
counts (here: kept on one hit in up to two replays). The test asserts what the shrink
guarantees whatever the replays answered (the result is a sub-schedule, at most weakened,
with which the bug came back, and without any one of whose steps it did not; no verdict
kept a candidate lacking the partition or the kill), and, when every replay holding both
brought the bug back, that the result is exactly the seeded sequence.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mallory.campaign.config import CampaignConfig
from mallory.campaign.loop import ScriptedStep, step_rng
from mallory.history.edn import Keyword, loads
from mallory.shrink.live_replay import LiveReplay
from nemesis.faults.targets import partition_grudge, pick_nodes
from tests.live.example_sut.example_cluster import SUT_DIR, build

pytestmark = pytest.mark.timeout(900)

NODES = ["n1", "n2", "n3"]
#: Padded with duplicates, which are irrelevant (TCP drops duplicate segments). On 3 nodes
#: `partition:majority` cuts one node off, drawn as `partition:one` draws it: the weakening
#: phase replaces it by `partition:one`, which cuts off the same node.
SCHEDULE = [("duplicate:pair", 0.5), ("duplicate:one", 0.5), ("partition:majority", 1.5), ("kill:one", 2.5)]
ESSENTIAL = ["partition:one", "kill:one"]


def write_spec(binary: Path, dest: Path) -> Path:
    """example-bugs.toml with per-node election timeouts and a late restart of n2."""
    text = (SUT_DIR / "example-bugs.toml").read_text()
    command = re.search(r"command = \[(.*?)\]", text, re.S)
    assert command, "example-bugs.toml has no start command: update this test"
    args = json.loads("[" + command.group(1) + "]")
    assert args[0] == "build/example-sut" and "--election-ms" in args, args
    args[0] = str(binary)
    args[args.index("--election-ms") + 1] = "$E"
    quoted = " ".join(a if a == "$E" else f"'{a}'" for a in args)
    script = ("case {index} in 1) E=100;; 2) E=200;; *) E=400;; esac; "
              "if [ {index} = 2 ] && [ -s {data_dir}/raft.log ]; then sleep 1; fi; exec " + quoted)
    spec = text[: command.start()] + "command = " + json.dumps(["/bin/sh", "-c", script]) + text[command.end():]
    path = dest / "sticky.toml"
    path.write_text(spec)
    return path


def cut_off(spec: str, seed: int, draw: int) -> list[str]:
    grudge = partition_grudge(spec, NODES, step_rng(seed, draw))
    return sorted(n for n, g in grudge.items() if len(g) == len(NODES) - 1)


def pick_seed() -> int:
    """A schedule seed whose draws cut n1 off and kill n2 (the draws are pure functions)."""
    p, k = (i for i, (a, _) in enumerate(SCHEDULE) if a in ("partition:majority", "kill:one"))
    return next(s for s in range(10_000) if cut_off("majority", s, p) == cut_off("one", s, p) == ["n1"]
                and pick_nodes("one", NODES, step_rng(s, k)) == ["n2"])


def test_shrink_reduces_a_padded_schedule_to_the_seeded_sequence(tmp_path):
    spec = write_spec(build(tmp_path / "build"), tmp_path)
    seed = pick_seed()
    config = CampaignConfig(sut=str(spec), port=7000, nodes=3, seed=1, policy="random",
                            faults=("partition", "kill", "duplicate"), workload="register", concurrency=2, rate=20,
                            window_s=0.5, reset_s=1.0, abstraction="event-history")
    script = [ScriptedStep(action, draw, window) for draw, (action, window) in enumerate(SCHEDULE)]

    # The bug bundle to shrink: the padded schedule, enacted by a scripted replay (up to
    # three times: it is no more deterministic than the shrink's replays).
    padded = LiveReplay(config, seed, "-", tmp_path / "padded")
    for _ in range(3):
        _, campaign = padded(script)
        bugs = [p for p in (Path(campaign) / "bugs").iterdir() if p.name.startswith("log-assertion-")]
        if bugs:
            break
    assert len(bugs) == 1, f"the padded schedule did not surface the bug: {list((Path(campaign) / 'bugs').iterdir())}"
    bundle = bugs[0]
    recorded = json.loads((bundle / "schedule.json").read_text())
    assert [s["action"] for s in recorded["steps"]] == [a for a, _ in SCHEDULE]

    out = tmp_path / "minimal"
    # --min-window above every window: no window is shortened (windows are not what this tests)
    shrink = subprocess.run([sys.executable, "-m", "mallory.cli", "shrink", str(bundle), "--replays", "2",
                             "--min-fraction", "0.5", "--min-window", "5", "--out", str(out)],
                            capture_output=True, text=True, timeout=780)
    assert shrink.returncode == 0, shrink.stdout + shrink.stderr
    assert "not deterministic" in shrink.stdout
    # each verdict as its replays gave it: kept on the first hit (no replay more), rejected after two misses
    candidates = re.findall(r"candidate \d+: .*: reappeared (\d)/(\d) .* -> (kept|rejected)", shrink.stdout)
    assert candidates and all((verdict == "kept") == (hits == "1") and (hits == "1" or total == "2")
                              for hits, total, verdict in candidates), shrink.stdout
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["signature"] == bundle.name
    assert provenance["shrunk_from"] == str(bundle.resolve())
    assert [s["action"] for s in provenance["original_steps"]] == [a for a, _ in SCHEDULE]
    lines = (out.with_name("minimal.work") / "journal.jsonl").read_text().splitlines()
    assert len(lines) == provenance["live_replays"] == sum(int(total) for _, total, _ in candidates)
    journal = [(tuple(map(tuple, e["candidate"])), e["hit"]) for e in map(json.loads, lines)]

    def answers(steps: list) -> list[bool]:
        return [hit for candidate, hit in journal if candidate == tuple(steps)]

    def both(steps) -> bool:
        return (any(a.startswith("partition:") and d == 2 for a, d, _ in steps)
                and any(a == "kill:one" and d == 3 for a, d, _ in steps))

    # What the shrink guarantees, whatever the replays answered. The bug needs the partition
    # and then the kill: no replay without both brought it back.
    assert not [c for c, hit in journal if hit and not both(c)], journal
    # The result: original steps in order, on their draws and windows, at most weakened; the
    # bug came back with it.
    original = {s["draw"]: (s["action"], s["draw"], s["window_s"]) for s in provenance["original_steps"]}
    result = [(s["action"], s["draw"], s["window_s"]) for s in provenance["steps"]]
    draws = [d for _, d, _ in result]
    assert draws == sorted(set(draws)) and all(w == original[d][2] for _, d, w in result), result
    assert both(result) and True in answers(result), (result, journal)
    # 1-minimal as the replays answered: with any one step of what dropping kept left out,
    # the bug did not come back.
    kept = [original[d] for d in draws]
    for i in range(len(kept)):
        without = kept[:i] + kept[i + 1:]
        assert answers(without) and True not in answers(without), (without, journal)
    # The partition is weakened unless the bug did not come back with the weaker one.
    at = draws.index(2)
    if result[at][0] == "partition:majority":
        weaker = [*result[:at], ("partition:one", 2, result[at][2]), *result[at + 1:]]
        assert answers(weaker) and True not in answers(weaker), (weaker, journal)
    # With replays that agreed (each one holding both faults brought the bug back), exactly
    # the seeded sequence, by the path the phases take.
    if all(hit for c, hit in journal if both(c)):
        assert [a for a, _, _ in result] == ESSENTIAL and draws == [2, 3], shrink.stdout
        assert "after drop faults: 2 steps: partition:majority" in shrink.stdout
        assert "after weaken faults: 2 steps: partition:one" in shrink.stdout

    minimal = json.loads((out / "schedule.json").read_text())  # the replay whose bundle it is
    assert [(s["action"], s["draw"]) for s in minimal["steps"]] == [(a, d) for a, d, _ in result]
    assert minimal["findings"] and bundle.name in minimal["findings"]

    # The run inside the new bundle is Jepsen-shaped: results.edn beside history.edn.
    (run,) = [p for p in out.iterdir() if (p / "history.edn").exists()]
    results = loads((run / "results.edn").read_text())
    assert results[Keyword("valid?")] is False
    assert bundle.name in [f[Keyword("signature")] for f in results[Keyword("nodes")][Keyword("findings")]]
