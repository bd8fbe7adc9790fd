"""`mallory fuzz --workers 2` for real: a local Ray started by the command, two workers each
with a 2-node netns cluster, one learner actor. As root, with Ray installed (tests/conftest.py
marks them), from the repository's root:

    sudo .venv/bin/python -m pytest -q tests/live/ray

Three campaigns, to keep CI's time: one with the pause-bug SUT (no build; every pause is a
bug) shows one store, merged records and one bundle per bug (about a minute); one with the
example SUT loses a worker and then the learner actor mid-campaign, goes on, and ends on a
Ctrl-C with nothing left behind (about two minutes); one with the pause-bug SUT whose
driver is killed with -9, after which `mallory cleanup` removes everything (about a
minute). While they run, no process of the local Ray listens on anything but loopback. On
a 2-core machine a local Ray takes 10-20 s to start and the two clusters come up side by
side."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from mallory import paths
from mallory.campaign.directory import CampaignDir
from mallory.cluster.registry import data_root, list_runs
from mallory.learner.learner import Learner
from tests.live.campaign.test_fuzz import assert_gone
from tests.live.campaign.test_replay import write_spec as write_pause_bug_spec
from tests.live.example_sut.example_cluster import SPEC, build


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
    return [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--workers", "2", "--calibrate", "0", *args]


def assert_workers_gone(out: Path) -> None:
    """Nothing of any worker's last cluster remains (each worker's cluster.json names its run)."""
    for layout in (out / "workers").glob("*/cluster.json"):
        assert_gone(layout.parent)


def test_two_workers_feed_one_store_and_a_bug_both_find_is_one_bundle(tmp_path):
    """The pause-bug SUT logs an assertion failure at every resume: with pauses only (and
    random choices, so both workers pause), every schedule of both workers finds it."""
    sut = write_pause_bug_spec(tmp_path / "pause-bug.toml")
    out = tmp_path / "campaign"
    proc = subprocess.run(fuzz("--sut", str(sut), "--nodes", "2", "--faults", "pause", "--workload", "none",
                               "--policy", "random", "--seed", "3", "--schedules", "4", "--steps", "3",
                               "--window", "1", "--reset", "1", "--out", str(out)),
                          capture_output=True, text=True, timeout=300, cwd=paths.HOME)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: the campaign holds a bug
    merged = CampaignDir(out)
    records = merged.read_schedules()
    assert [r["index"] for r in records] == [0, 1, 2, 3], "--schedules 4 means 4 in all"
    by_worker = {w: [r for r in records if r["worker"] == w] for w in ("w0", "w1")}
    assert all(by_worker.values()), "both workers ran schedules"
    for worker, mine in by_worker.items():  # the merged records are the workers' own
        own = CampaignDir(out / "workers" / worker)
        assert [r["worker_index"] for r in mine] == [r["index"] for r in own.read_schedules()]
        assert own.read_stats()["worker"] == worker
    # one store: its checkpoint holds every state either worker met, numbered once; a
    # state is new once in the campaign, whichever worker met it
    store = Learner.from_checkpoint(merged.load_learner()).store
    steps = [s for r in records for s in r["steps"]]
    ids = {s["state"] for s in steps} | {r["initial_state"] for r in records}
    assert ids - {None} <= set(range(len(store))) and int(merged.read_stats()["distinct_states"]) == len(store)
    news = [s["state"] for s in steps if s["new"]]
    assert len(news) == len(set(news))
    stats = merged.read_stats()
    assert int(stats["steps_done"]) == len(steps) and stats["workers"] == "2"
    assert float(stats["decision_ms_p99"]) >= float(stats["decision_ms_p50"]) > 0
    assert float(stats["learner_rss_mb"]) > 0
    assert len((out / "plot_data").read_text().splitlines()) == 1 + len(steps)
    assert "decision latency over all workers: p50" in proc.stdout
    # one bug, one bundle, a sighting per finding schedule of either worker
    (signature,) = merged.known_bugs()
    assert signature.startswith("log-assertion-")
    bundle = out / "bugs" / signature
    sightings = [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_text().splitlines()]
    assert {s["worker"] for s in sightings} == {"w0", "w1"}
    assert len(sightings) == sum(1 for r in records if r["findings"])
    first = orjson.loads((bundle / "schedule.json").read_bytes())
    assert (bundle / f"{first['index']:06d}" / "results.edn").exists(), "the first finder's run came along"
    for worker in ("w0", "w1"):  # reported to the learner, so not kept in the worker's directory
        assert not any((out / "workers" / worker / "bugs").iterdir())
    assert_workers_gone(out)


def _wait(proc: subprocess.Popen, ready, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the campaign ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _steps(directory: Path) -> int:
    path = directory / "plot_data"
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


def _recorded_since(out: Path, moment: float) -> list[Path]:
    return [path for path in (out / "schedules").glob("[0-9]*.json") if path.stat().st_mtime > moment]


def ray_processes() -> set[int]:
    """Every process of a Ray node on this machine: its raylet, GCS, agents and workers."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout.splitlines()
    marks = ("raylet", "gcs_server", "ray::", "ray/_private/", "ray/dashboard/")
    return {int(line.split(None, 1)[0]) for line in ps if any(mark in line for mark in marks)}


def listeners(pids: set[int]) -> list[tuple[str, set[int]]]:
    """The local address of every listening TCP socket and bound UDP socket of this network
    namespace held by one of `pids` (`ss`: as root it names every socket's processes)."""
    found = []
    for line in subprocess.run(["ss", "-H", "-ltunp"], capture_output=True, text=True, check=True).stdout.splitlines():
        fields = line.split()
        holders = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if holders & pids:
            found.append((fields[4], holders & pids))
    return found


def on_loopback(local: str) -> bool:
    """Whether an `ss` local address ("127.0.0.1:41234", "[::1]:5", "*:6379",
    "0.0.0.0:80", "127.0.0.53%lo:53") is on loopback alone."""
    host = local.rsplit(":", 1)[0].strip("[]").split("%")[0]
    if host in ("*", ""):
        return False
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def assert_ray_on_loopback(ray_before: set[int]) -> None:
    """The local Ray listens (so `ss` sees its sockets), and only on loopback."""
    ray_listeners = listeners(ray_processes() - ray_before)
    assert ray_listeners, "no listener of the local Ray found: the check would see nothing"
    outside = [(local, pids) for local, pids in ray_listeners if not on_loopback(local)]
    assert not outside, f"the local Ray listens beyond loopback: {outside}"


@dataclass
class Leftovers:
    """What a local Ray could leave on this machine, as it is now."""

    ray_runs: set[str]  # registered runs of local Rays (ray-<hex>)
    ray_dirs: set[str]  # their data directories
    sessions: set[str]  # Ray's default temp dir's sessions (/tmp/ray)
    home_token: bool  # ~/.ray/auth_token

    @classmethod
    def now(cls) -> "Leftovers":
        root = data_root()
        return cls({r.name for r in list_runs() if r.name.startswith("ray-")},
                   {p.name for p in root.glob("ray-*")} if root.is_dir() else set(),
                   {p.name for p in Path("/tmp/ray").glob("session_*")},
                   (Path.home() / ".ray" / "auth_token").exists())

    def assert_no_more_than(self, before: "Leftovers") -> None:
        assert self.ray_runs <= before.ray_runs, f"a local Ray's run is left: {self.ray_runs - before.ray_runs}"
        assert self.ray_dirs <= before.ray_dirs, f"a local Ray's directory is left: {self.ray_dirs - before.ray_dirs}"
        assert self.sessions <= before.sessions, "a local Ray wrote a session in /tmp/ray"
        assert self.home_token <= before.home_token, "a local Ray wrote ~/.ray/auth_token"


def wait_ray_gone(ray_before: set[int], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds  # Ray's workers leave once their raylet is gone
    while ray_processes() - ray_before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_processes() - ray_before, "the local Ray's processes outlived the campaign"


def test_a_worker_then_the_learner_actor_killed_mid_campaign_do_not_end_it(spec, tmp_path):
    """...and a Ctrl-C then ends it as a single-process campaign ends: after the step, with
    every cluster and the local Ray gone."""
    out = tmp_path / "campaign"
    merged = CampaignDir(out)
    ray_before, left_before = ray_processes(), Leftovers.now()
    proc = subprocess.Popen(fuzz("--sut", str(spec), "--nodes", "2", "--steps", "3", "--window", "1.5", "--reset", "1",
                                 "--workload", "register", "--rate", "10", "--faults", "partition,kill,pause",
                                 "--seed", "11", "--duration", "300s", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=paths.HOME)
    try:
        # a worker's process dies mid-schedule
        w1 = out / "workers" / "w1"
        _wait(proc, lambda: _steps(w1) >= 2, "w1's second step")
        assert_ray_on_loopback(ray_before)
        stats = CampaignDir(w1).read_stats()
        dead_run, pid = stats["cluster_run"], int(stats["fuzzer_pid"])  # the worker actor's process
        dead_layout = tmp_path / "dead-w1"
        dead_layout.mkdir()
        shutil.copy(w1 / "cluster.json", dead_layout / "cluster.json")  # its replacement rewrites it
        os.kill(pid, signal.SIGKILL)
        worker_killed_at = time.time()
        # then the learner actor's, once a schedule ended after that
        _wait(proc, lambda: _recorded_since(out, worker_killed_at), "a schedule recorded after the worker's death")
        learner_pid = int(merged.read_stats()["learner_pid"])
        states = len(Learner.from_checkpoint(merged.load_learner()).store)
        os.kill(learner_pid, signal.SIGKILL)
        learner_killed_at = time.time()
        # the restarted learner records schedules again; then Ctrl-C
        _wait(proc, lambda: _recorded_since(out, learner_killed_at), "a schedule recorded after the learner's death")
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1), stdout + stderr
    # the worker: replaced, and its cluster removed on its machine once its process was gone
    assert "worker w1 died" in stdout, stdout
    assert dead_run not in {r.name for r in list_runs()}, "the dead worker's run was cleaned"
    assert_gone(dead_layout)
    # the learner: restarted by Ray from its checkpoint, and the campaign went on recording
    stats = merged.read_stats()
    assert stats["learner_pid"] != str(learner_pid), "the learner actor was restarted"
    assert len(Learner.from_checkpoint(merged.load_learner()).store) >= states
    assert int(stats["distinct_states"]) >= states
    assert [r["index"] for r in merged.read_schedules()] == list(range(merged.schedules_done()))
    assert stats["schedules_done"] == str(merged.schedules_done())
    # the Ctrl-C: every worker's cluster torn down, the local Ray stopped and removed, its
    # logs kept in the campaign directory
    assert_workers_gone(out)
    wait_ray_gone(ray_before)
    Leftovers.now().assert_no_more_than(left_before)
    assert (out / "ray-logs" / "raylet.out").stat().st_size > 0, "the local Ray's logs are kept"
    assert list((out / "ray-logs").glob("worker*.err")), "and with them the worker actors' own log lines"


def test_after_a_kill_9_of_the_driver_mallory_cleanup_removes_what_its_local_ray_left(tmp_path):
    """The driver killed with -9 cannot stop its Ray: the kernel kills the processes it
    started, and `mallory cleanup` (run at once, before Ray's workers may have noticed)
    removes the rest: the Ray run, its processes and directory, the workers' clusters."""
    sut = write_pause_bug_spec(tmp_path / "pause-bug.toml")
    out = tmp_path / "campaign"
    ray_before, left_before = ray_processes(), Leftovers.now()
    proc = subprocess.Popen(fuzz("--sut", str(sut), "--nodes", "2", "--faults", "pause", "--workload", "none",
                                 "--policy", "random", "--seed", "5", "--steps", "3", "--window", "1",
                                 "--reset", "1", "--duration", "300s", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=paths.HOME)
    try:
        _wait(proc, lambda: all(_steps(out / "workers" / w) >= 1 for w in ("w0", "w1")), "a step of each worker")
        assert_ray_on_loopback(ray_before)
        (ray_run,) = {r.name for r in list_runs() if r.name.startswith("ray-")} - left_before.ray_runs
        assert (data_root() / ray_run / "ray").is_dir(), "the local Ray's files are in its run's directory"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cleanup = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup"], capture_output=True, text=True,
                             timeout=120, cwd=paths.HOME)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert ray_run in cleanup.stdout, cleanup.stdout
    wait_ray_gone(ray_before, seconds=5)
    Leftovers.now().assert_no_more_than(left_before)
    assert_workers_gone(out)
