"""`mallory fuzz --workers 2` for real: a local Ray started by the command, two workers each
with a 2-node netns cluster of the example SUT (or the pause-bug SUT of tests/live/campaign),
one learner actor. As root, with Ray installed (tests/conftest.py marks them):

    sudo .venv/bin/python -m pytest -q tests/live/ray

Each test takes 2-4 minutes on a 2-core machine (two clusters come up side by side)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from mallory.campaign.directory import CampaignDir
from mallory.learner.learner import Learner
from tests.live.campaign.test_fuzz import assert_gone
from tests.live.campaign.test_replay import write_spec as write_pause_bug_spec
from tests.live.example_sut.example_cluster import SPEC, build

FAULTS = "partition,kill,pause"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    """The shipped example spec, pointed at a fresh build of the SUT."""
    build_dir = tmp_path_factory.mktemp("example-build")
    binary = build(build_dir)
    text = SPEC.read_text().replace('"build/example-sut"', json.dumps(str(binary)))
    assert str(binary) in text, "the shipped spec's program path changed: update this fixture"
    path = build_dir / "example.toml"
    path.write_text(text)
    return path


def fuzz(*args: str) -> list[str]:
    return [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", *args]


def example_args(spec: Path, out: Path, *more: str) -> list[str]:
    return ["--sut", str(spec), "--nodes", "2", "--steps", "4", "--window", "1.5", "--reset", "1",
            "--workload", "register", "--rate", "10", "--faults", FAULTS, "--seed", "11", "--calibrate", "0",
            "--out", str(out), "--workers", "2", *more]


def worker_records(out: Path, worker: str) -> list[dict]:
    return CampaignDir(out / "workers" / worker).read_schedules()


def assert_workers_gone(out: Path) -> None:
    """Nothing of any worker's cluster remains (each worker's cluster.json names its run)."""
    for layout in (out / "workers").glob("*/cluster.json"):
        assert_gone(layout.parent)


def test_two_workers_share_one_store_and_merge_into_one_directory(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.run(fuzz(*example_args(spec, out, "--schedules", "4")), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    merged = CampaignDir(out)
    records = merged.read_schedules()
    assert [r["index"] for r in records] == [0, 1, 2, 3], "--schedules 4 means 4 in all"
    by_worker = {w: [r for r in records if r["worker"] == w] for w in ("w0", "w1")}
    assert all(by_worker.values()), "both workers ran schedules"
    for worker, mine in by_worker.items():  # the merged records are the workers' own
        assert [r["worker_index"] for r in mine] == [r["index"] for r in worker_records(out, worker)]
    # one store: its checkpoint holds every state either worker met, numbered once, and no
    # state is new twice (with a store per worker, the steady state would be new to each)
    store = Learner.from_checkpoint(merged.load_learner()).store
    steps = [s for r in records for s in r["steps"]]
    ids = {s["state"] for s in steps if s["state"] is not None} | {r["initial_state"] for r in records} - {None}
    assert ids <= set(range(len(store))) and int(merged.read_stats()["distinct_states"]) == len(store)
    news = [s["state"] for s in steps if s["new"]]
    assert len(news) == len(set(news)), "a state is new once in the campaign, whichever worker met it"
    seen = {w: {s["state"] for r in mine for s in r["steps"]} | {r["initial_state"] for r in mine}
            for w, mine in by_worker.items()}
    assert seen["w0"] & seen["w1"] - {None}, "the two clusters' common behaviour is one state"
    stats = merged.read_stats()
    assert int(stats["steps_done"]) == len(steps) and stats["workers"] == "2"
    assert float(stats["decision_ms_p99"]) >= float(stats["decision_ms_p50"]) > 0
    assert float(stats["learner_rss_mb"]) > 0
    assert len((out / "plot_data").read_text().splitlines()) == 1 + len(steps)
    assert "decision latency over all workers: p50" in proc.stdout
    assert_workers_gone(out)


def test_a_bug_both_workers_find_is_one_bundle_with_each_workers_sightings(tmp_path):
    """The pause-bug SUT logs an assertion failure at every resume: with pauses only, every
    schedule of both workers finds it."""
    sut = write_pause_bug_spec(tmp_path / "pause-bug.toml")
    out = tmp_path / "campaign"
    proc = subprocess.run(fuzz("--sut", str(sut), "--nodes", "2", "--faults", "pause", "--workload", "none",
                               "--policy", "random", "--seed", "3", "--schedules", "4", "--steps", "4", "--window", "1",
                               "--reset", "1", "--calibrate", "0", "--out", str(out), "--workers", "2"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: the campaign holds a bug
    merged = CampaignDir(out)
    (signature,) = merged.known_bugs()
    assert signature.startswith("log-assertion-")
    bundle = out / "bugs" / signature
    sightings = [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_text().splitlines()]
    assert {s["worker"] for s in sightings} == {"w0", "w1"}
    assert len(sightings) == sum(1 for r in merged.read_schedules() if r["findings"])
    first = orjson.loads((bundle / "schedule.json").read_bytes())
    assert (bundle / f"{first['index']:06d}" / "results.edn").exists(), "the first finder's run came along"
    for worker in ("w0", "w1"):
        assert not (out / "workers" / worker / "bugs").exists() or not any((out / "workers" / worker / "bugs").iterdir())
    assert_workers_gone(out)


def _wait(proc: subprocess.Popen, ready, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the campaign ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _steps(directory: Path) -> int:
    path = directory / "plot_data"
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


def test_a_worker_killed_mid_campaign_does_not_end_it(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*example_args(spec, out, "--duration", "150s")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        w1 = out / "workers" / "w1"
        _wait(proc, lambda: _steps(w1) >= 2, "w1's second step")
        stats = CampaignDir(w1).read_stats()
        run, pid = stats["cluster_run"], int(stats["fuzzer_pid"])  # the worker actor's process
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1), stdout + stderr
    assert "worker w1 died" in stdout, stdout
    merged = CampaignDir(out)
    assert merged.read_stats()["schedules_done"] == str(merged.schedules_done())
    later = [path for path in (out / "schedules").glob("*.json") if path.stat().st_mtime > killed_at]
    assert later, "schedules went on being recorded after the kill"
    # the dead worker's cluster was removed on its machine (its run is not registered any more)
    from mallory.cluster.registry import list_runs

    assert run not in {r.name for r in list_runs()}, "the dead worker's run was cleaned"
    assert_workers_gone(out)


def test_the_learner_actor_killed_mid_campaign_restores_from_its_checkpoint(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*example_args(spec, out, "--duration", "120s")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        merged = CampaignDir(out)
        _wait(proc, lambda: merged.schedules_done() >= 1, "the first schedule")
        states = len(Learner.from_checkpoint(merged.load_learner()).store)
        os.kill(int(merged.read_stats()["learner_pid"]), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1), stdout + stderr
    stats = merged.read_stats()
    assert int(stats["schedules_done"]) > 1 and int(stats["distinct_states"]) >= states
    assert len(Learner.from_checkpoint(merged.load_learner()).store) >= states
    assert [r["index"] for r in merged.read_schedules()] == list(range(merged.schedules_done()))
    assert_workers_gone(out)
