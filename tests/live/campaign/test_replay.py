"""`mallory replay` brings a deliberately injected bug back from its bundle (as root).

The SUT (pause_bug_sut.py) logs an assertion failure whenever it is resumed after a pause:
a campaign whose only faults are pauses finds it, and replaying the bundle's schedule on a
fresh cluster finds it again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mallory.campaign.directory import CampaignDir

SUT = Path(__file__).with_name("pause_bug_sut.py")


def write_spec(path: Path) -> Path:
    path.write_text(
        f'''name = "pause-bug"
[start]
command = [{json.dumps(sys.executable)}, {json.dumps(str(SUT))}, "{{address}}", "{{port}}"]
[ports]
client = 7300
[stop]
signal = "SIGTERM"
timeout = 3
[ready]
probe = "tcp"
port = "client"
timeout = 10
'''
    )
    return path


def mallory(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mallory.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_replay_reproduces_an_injected_bug_from_its_bundle(tmp_path):
    spec = write_spec(tmp_path / "pause-bug.toml")
    out = tmp_path / "campaign"
    fuzz = mallory("fuzz", "--plain", "--sut", str(spec), "--nodes", "2", "--faults", "pause", "--workload", "none",
                   "--policy", "random", "--seed", "3", "--schedules", "1", "--steps", "6", "--window", "1",
                   "--reset", "1", "--calibrate", "0", "--out", str(out))
    assert fuzz.returncode == 1, fuzz.stdout + fuzz.stderr  # 1: the campaign found a bug
    bugs = CampaignDir(out).known_bugs()
    assert len(bugs) == 1, (bugs, fuzz.stdout)
    (signature,) = bugs
    assert signature.startswith("log-assertion-")
    bundle = out / "bugs" / signature
    for name in ("report.json", "schedule.json", "campaign.json", "sightings.jsonl"):
        assert (bundle / name).exists(), name

    replay = mallory("replay", str(bundle), "--attempts", "2")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert f"{signature}: reappeared in 2/2 attempts" in replay.stdout
    assert "not deterministic" in replay.stdout
    for attempt in ("01", "02"):
        replayed = CampaignDir(bundle / "replays" / attempt).read_schedules()[0]
        original = json.loads((bundle / "schedule.json").read_text())
        assert [s["action"] for s in replayed["steps"]] == [s["action"] for s in original["steps"]]
