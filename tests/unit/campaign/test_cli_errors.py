"""`mallory fuzz` and `mallory replay` reject bad input with a reason, before touching the
machine (no cluster is created, no directory is overwritten). No root needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mallory import paths
from mallory.commands.fuzz import parse_duration
from mallory.errors import MalloryError

EXAMPLE = paths.SUTS / "example" / "example.toml"
SETS = paths.SUTS / "example" / "filter_sets.py"


def mallory(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mallory.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args, reason",
    [
        (["fuzz", "--sut", "x.toml"], "either --out DIR"),
        (["fuzz", "--resume", "/nonexistent-campaign"], "holds no campaign"),
        (["fuzz", "--out", "{tmp}/c", "--sut", "{tmp}/missing.toml"], "no such spec file"),
        (["fuzz", "--out", "{tmp}/c", "--sut", "redis-replication", "--duration", "soon"], "use e.g. 90s"),
        (["fuzz", "--out", "{tmp}/c"], "--sut is required"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE)],
         "cannot run the list-append workload: its clients run register; choose with --workload (register or none)"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--faults", "partition,kil"],
         "unknown fault family 'kil'"),
        (["fuzz", "--out", "/proc/no-such-dir/c", "--sut", str(EXAMPLE), "--workload", "register"],
         "cannot create the campaign directory /proc/no-such-dir/c"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--waypoints", str(EXAMPLE)],
         "example.toml: expected one or more [[waypoint]] tables"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--filter-sets", "{tmp}/no.py"],
         "no.py: no such file"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--filter-sets", str(EXAMPLE)],
         f"filter sets {EXAMPLE} line"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--filter-sets", str(SETS),
          "--faults", "partition"], "--filter-sets gives filter sets, but faults names none: add filters"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--filter-sets", str(SETS),
          "--faults", "filters:nope"], "unknown spec 'nope' in 'filters:nope' (filters specs: delay-append-replies"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--filter-sets", str(SETS),
          "--backend", "docker"], "--filter-sets needs the netns backend"),
        (["fuzz", "--out", "{tmp}/c", "--sut", str(EXAMPLE), "--workload", "register", "--policy", "modelfuzz"],
         "--policy 'modelfuzz' needs a protocol model (--model FILE)"),
        (["replay", "{tmp}"], "is not a bug bundle"),
        (["replay", "{tmp}", "--attempts", "0"], "--attempts must be at least 1"),
    ],
)
def test_bad_input_is_refused_with_a_reason(tmp_path, args, reason):
    proc = mallory(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode == 254, proc.stderr
    assert reason in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "c").exists(), "nothing is created for a refused command"


def test_an_existing_campaign_is_not_overwritten(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "campaign.json").write_text("{}")
    proc = mallory("fuzz", "--out", str(tmp_path / "c"), "--sut", "redis-replication")
    assert proc.returncode == 254 and "--resume" in proc.stderr
    assert (tmp_path / "c" / "campaign.json").read_text() == "{}"


def test_durations():
    assert [parse_duration(t) for t in ("90", "90s", "30m", "1.5h", "2d")] == [90, 90, 1800, 5400, 172800]
    with pytest.raises(MalloryError):
        parse_duration("1 hour")


def test_replay_of_a_bundle_whose_spec_moved_creates_no_attempt_dir(tmp_path):
    bundle = tmp_path / "bugs" / "log_x"
    bundle.mkdir(parents=True)
    (bundle / "campaign.json").write_text('{"sut": "%s/gone.toml", "nodes": 3}' % tmp_path)
    (bundle / "schedule.json").write_text('{"index": 0, "seed": 1, "steps": [{"step": 0, "action": "kill:one", "draw": 0}]}')
    (bundle / "report.json").write_text('{"signature": "log:x"}')
    proc = mallory("replay", str(bundle))
    assert proc.returncode == 254, proc.stderr
    assert "gone.toml" in proc.stderr and "Traceback" not in proc.stderr
    assert not (bundle / "replays").exists()
