"""Real short campaigns for the report's tests, run once per session (as root).

No existing fixture runs a campaign that outlives its test (tests/campaign's are
function-scoped), so these run their own, as short as gives real input: two campaigns on
the example SUT with different policies (the overlay), and one on the pause-bug SUT of
tests/campaign, which always finds its bug (a bundle for the bug pages).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live.campaign.test_replay import write_spec as write_pause_bug_spec
from tests.live.example_sut.example_cluster import SPEC, build


def _fuzz(out: Path, *args: str) -> Path:
    # no calibration: the report's tests need campaigns, not a calibrated threshold
    argv = [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--calibrate", "0", "--out", str(out), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    found = (out / "bugs").is_dir() and any(not p.name.startswith(".") for p in (out / "bugs").iterdir())
    assert proc.returncode == (1 if found else 0), proc.stdout + proc.stderr  # 1: the campaign found bugs
    return out



@pytest.fixture(scope="session")
def example_spec(tmp_path_factory) -> Path:
    """The shipped example spec, pointed at a fresh build (its catalogue next to it)."""
    build_dir = tmp_path_factory.mktemp("report-example-build")
    binary = build(build_dir)
    shipped = SPEC.read_text()
    assert '"build/example-sut"' in shipped, "the shipped spec's program path changed: update this fixture"
    path = build_dir / "example.toml"
    path.write_text(shipped.replace('"build/example-sut"', json.dumps(str(binary))))
    return path


def _example_campaign(spec: Path, out: Path, policy: str, seed: int) -> Path:
    return _fuzz(out, "--sut", str(spec), "--nodes", "3", "--schedules", "1", "--steps", "4", "--window", "1.5",
                 "--reset", "1", "--workload", "register", "--rate", "20", "--faults", "partition,kill,pause,delay",
                 "--policy", policy, "--seed", str(seed))


@pytest.fixture(scope="session")
def qlearning_campaign(example_spec, tmp_path_factory) -> Path:
    return _example_campaign(example_spec, tmp_path_factory.mktemp("report-q") / "campaign", "qlearning", 7)


@pytest.fixture(scope="session")
def random_campaign(example_spec, tmp_path_factory) -> Path:
    return _example_campaign(example_spec, tmp_path_factory.mktemp("report-r") / "campaign", "random", 8)


@pytest.fixture(scope="session")
def bug_campaign(tmp_path_factory) -> Path:
    """A campaign whose only faults are pauses on a SUT that logs an assertion failure on
    every resume: it always records one bug bundle."""
    base = tmp_path_factory.mktemp("report-bug")
    spec = write_pause_bug_spec(base / "pause-bug.toml")
    out = _fuzz(base / "campaign", "--sut", str(spec), "--nodes", "2", "--faults", "pause", "--workload", "none",
                "--policy", "random", "--seed", "3", "--schedules", "1", "--steps", "6", "--window", "1",
                "--reset", "1")
    bugs = [p for p in (out / "bugs").iterdir() if p.is_dir()]
    assert len(bugs) == 1, bugs
    return out
