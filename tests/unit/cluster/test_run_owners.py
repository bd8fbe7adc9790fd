"""Runs have owners: `mallory cleanup` removes a run only once its owner process is gone
(a stale run), keeps live and detached ones unless told, and `mallory cluster list` says
which is which. The owner here is a real child process that registers a run in a registry
under tmp_path ($MALLORY_STATE_DIR), alive and then dead."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mallory.cli import main
from mallory.cluster.registry import (
    ProcessId,
    cleanup_all,
    detach_run,
    list_runs,
    load_run,
    proc_start_ticks,
    proc_state,
    register_run,
    run_status,
)
from mallory.errors import MalloryError
from mallory.polling import wait_until

OWNER = """
import sys
from mallory.cluster.registry import register_run
register_run(sys.argv[1])
print("registered", flush=True)
sys.stdin.read()  # owns the run until the test closes its stdin or kills it
"""


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "state"
    monkeypatch.setenv("MALLORY_STATE_DIR", str(root))
    monkeypatch.setenv("MALLORY_DATA_ROOT", str(tmp_path / "data"))
    return root


@pytest.fixture
def owner(registry):
    """Start a child process that registers run `name` and holds it; yields the factory."""
    children: list[subprocess.Popen] = []

    def start(name: str) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", OWNER, name], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "registered"
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()


def cluster_list(capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["cluster", "list"]) == 0
    return {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}


def test_cleanup_keeps_a_live_run_and_removes_it_once_its_owner_is_dead(owner, registry, capsys):
    child = owner("live1")
    assert load_run("live1").owner == ProcessId(child.pid, proc_start_ticks(child.pid))
    assert cluster_list(capsys)["live1"] | {"state": None} == {
        "name": "live1", "index": 0, "state": None, "status": "live", "owner": child.pid}

    assert main(["cleanup"]) == 0
    out = capsys.readouterr().out
    assert f"run live1: live (its owner, pid {child.pid}, still runs), kept; --force removes it" in out
    assert (registry / "live1").is_dir()
    assert main(["cleanup", "live1"]) == 0  # named, still kept
    assert "run live1: live" in capsys.readouterr().out and (registry / "live1").is_dir()

    child.kill()  # not reaped yet: a zombie owner is a dead one
    wait_until(lambda: proc_state(child.pid) == "Z", 5, "the owner to die")
    assert run_status(load_run("live1")) == "stale"
    child.wait()
    assert cluster_list(capsys)["live1"]["status"] == "stale"
    assert main(["cleanup"]) == 0
    assert "run live1: removed" in capsys.readouterr().out
    assert not (registry / "live1").exists() and cluster_list(capsys) == {}


def test_force_removes_a_live_run(owner, registry, capsys):
    child = owner("live2")
    assert main(["cleanup", "--force"]) == 0
    assert "run live2: removed" in capsys.readouterr().out and not (registry / "live2").exists()
    assert child.poll() is None  # the owner itself is not the run's to kill


def test_a_reused_pid_is_not_the_owner(registry):
    record = register_run("reused")
    assert run_status(record) == "live"  # this test process owns it
    record.owner = replace(record.owner, start=record.owner.start + 1)  # same pid, another process
    assert run_status(record) == "stale"


def test_a_detached_run_is_kept_by_the_sweep_and_removed_when_named(registry, capsys):
    record = register_run("byhand")
    detach_run(record)
    assert load_run("byhand").owner is None and cluster_list(capsys)["byhand"]["status"] == "detached"
    removed, kept = cleanup_all()
    assert removed == {} and [(r.name, status) for r, status in kept] == [("byhand", "detached")]
    assert main(["cleanup"]) == 0
    assert "run byhand: detached (made by `mallory cluster up`), kept" in capsys.readouterr().out
    assert main(["cleanup", "byhand"]) == 0
    assert not (registry / "byhand").exists()


def test_a_half_registered_run_is_stale(registry):
    (registry / "half").mkdir(parents=True)  # killed between mkdir and run.json
    assert [run_status(r) for r in list_runs()] == ["stale"]
    removed, kept = cleanup_all()
    assert list(removed) == ["half"] and kept == []


def test_docker_runs_of_a_project_are_cleaned_unless_live(owner, registry):
    from mallory.campaign.docker_stack import cleanup_project_runs

    child = owner("dk")
    load_run("dk").layout_path.write_text(json.dumps({"project": "p1"}))
    with pytest.raises(MalloryError, match=f"compose project 'p1' is driven by run 'dk' \\(pid {child.pid}\\)"):
        cleanup_project_runs("p1")
    assert cleanup_project_runs("p2") == []  # another project's run is not looked at
    child.kill()
    child.wait()
    cleanup_project_runs("p1")
    assert not (registry / "dk").exists()


def test_secrets_are_written_for_the_owner_only_and_go_with_the_run(registry):
    record = register_run("sec")
    path = record.write_secret("mediator.token", "c0ffee")
    assert path.read_text() == "c0ffee" and path.stat().st_mode & 0o777 == 0o600
    assert record.write_secret("mediator.token", "beef").read_text() == "beef"  # replaced, still 0600
    assert path.stat().st_mode & 0o777 == 0o600
    cleanup_all(force=True)
    assert not path.exists()


#: an owner whose process also holds a file open under a directory (a worker actor of a
#: local Ray, which owns its cluster's run and writes its log into Ray's session directory)
OWNER_USING = """
import sys
from mallory.cluster.registry import register_run
register_run(sys.argv[1])
log = open(sys.argv[2], "a")
print("registered", flush=True)
sys.stdin.read()
"""


def test_a_run_whose_owner_the_sweep_kills_is_removed_by_the_same_sweep(registry, tmp_path):
    ray = register_run("ray-1")  # a local Ray's run whose driver was killed: stale
    meta = json.loads((ray.state_dir / "run.json").read_text())
    (ray.state_dir / "run.json").write_text(json.dumps(meta | {"owner": {"pid": 1, "start": -1}}))
    ray_dir = tmp_path / "ray"
    ray_dir.mkdir()
    ray.record(uses=str(ray_dir))
    worker = subprocess.Popen([sys.executable, "-c", OWNER_USING, "fz-w0", str(ray_dir / "worker.out")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "registered"
        assert run_status(load_run("fz-w0")) == "live" and run_status(load_run("ray-1")) == "stale"
        removed, kept = cleanup_all()
        assert set(removed) == {"ray-1", "fz-w0"} and not kept
        assert f"process {worker.pid}" in removed["ray-1"], "the worker holding a file under Ray's directory"
        assert not list_runs()
    finally:
        worker.kill()
        worker.wait()
