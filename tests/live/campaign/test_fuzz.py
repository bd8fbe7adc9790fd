"""`mallory fuzz` for real: the example SUT on a netns cluster, the mediator in the gateway,
observers on every node, real faults. Short campaigns; as root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mallory.campaign.directory import CampaignDir
from tests.live.cluster.conftest import leftovers
from tests.live.example_sut.example_cluster import SPEC, build

FAULTS = "partition,kill,pause,delay,clock"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    """The shipped example spec, pointed at a fresh build of the SUT."""
    build_dir = tmp_path_factory.mktemp("example-build")
    binary = build(build_dir)
    shipped = SPEC.read_text()
    assert '"build/example-sut"' in shipped, "the shipped spec's program path changed: update this fixture"
    text = shipped.replace('"build/example-sut"', json.dumps(str(binary)))
    path = build_dir / "example.toml"
    path.write_text(text)
    return path


def fuzz(*args: str) -> list[str]:
    return [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", *args]


def campaign_args(spec: Path, out: Path, schedules: int, steps: int = 3) -> list[str]:
    return [
        "--sut", str(spec), "--nodes", "3", "--schedules", str(schedules), "--steps", str(steps),
        "--window", "1.5", "--reset", "1", "--workload", "register", "--rate", "20",
        "--faults", FAULTS, "--seed", "7", "--calibrate", "0", "--out", str(out),
    ]


def assert_gone(campaign: Path) -> None:
    """Nothing of the campaign's cluster remains (namespaces, links, iptables, shm, processes)."""
    layout = json.loads((campaign / "cluster.json").read_text())
    prefix = layout["supernet"].split(".0.0/")[0] + "."
    pids = [int(line.split()[0]) for line in subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
            if f"--run {layout['run']}" in line]
    left = leftovers(layout["run"], layout["host_interface"], prefix, pids)
    # other runs (concurrent tests) may have observer chains of their own: only ours count
    left.iptables = {ns: lines for ns, lines in left.iptables.items()
                     if ns in ("", *left.netns) or any(prefix in line for line in lines)}
    assert left.empty() and not pids, (left, pids)


def test_short_campaign_writes_a_complete_directory_and_leaves_nothing(spec, tmp_path):
    """The example SUT without its seeded bugs is linearizable under these faults (kill,
    pause and partition: suts/example/README.md; a delay keeps each link's order; it reads
    no wall clock, so clock faults do not reach it), so every history checks valid and
    the campaign finds nothing."""
    out = tmp_path / "campaign"
    proc = subprocess.run(fuzz(*campaign_args(spec, out, schedules=2)), capture_output=True, text=True, timeout=300)
    d = CampaignDir(out)
    assert proc.returncode == 0 and not d.known_bugs(), proc.stdout + proc.stderr
    assert "2 schedules, 6 steps" in proc.stdout
    stats = d.read_stats()
    assert stats["schedules_done"] == "2" and stats["steps_done"] == "6"
    assert int(stats["distinct_states"]) >= 2, "faults on a live cluster lead to more than one state"
    schedules = d.read_schedules()
    for record in schedules:
        assert record["reset"]["healthy"], record["reset"]
        assert record["history"]["valid"] is True and not record["findings"], record
        for step in record["steps"]:
            if step["report"] is not None:
                assert step["report"]["verified"], step["report"]
            if not step["late"]:
                assert step["events"] > 0 and step["state"] is not None
        run = out / "runs" / f"{record['index']:06d}"
        assert (run / "history.edn").stat().st_size > 0
        # the verdict's pictures beside results.edn: at least the latency plot
        assert ET.parse(run / "latency-raw.svg").getroot().get("class") == "latency"
    enacted = {s["action"].split(":")[0] for r in schedules for s in r["steps"]}
    assert enacted - {"heal", "noop"}, "at least one real fault was enacted"
    assert (out / "events" / "events.jsonl").stat().st_size > 0
    plot = (out / "plot_data").read_text().splitlines()
    assert len(plot) == 1 + 6
    assert_gone(out)


def test_kill9_then_cleanup_then_resume(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*campaign_args(spec, out, schedules=4)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = CampaignDir(out)
    deadline = time.monotonic() + 180
    # kill it mid-schedule: after the first schedule is recorded and a step of the next is done
    while time.monotonic() < deadline:
        if d.schedules_done() >= 1 and len((out / "plot_data").read_text().splitlines()) >= 1 + 4:
            break
        assert proc.poll() is None, "the campaign ended before it could be killed"
        time.sleep(0.2)
    stats = d.read_stats()
    run = stats["cluster_run"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = d.schedules_done()
    states_before = int(stats["distinct_states"])
    assert done_before >= 1

    cleanup = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], capture_output=True, text=True, timeout=120)
    assert cleanup.returncode == 0, cleanup.stderr
    assert_gone(out)

    resumed = subprocess.run(
        fuzz("--resume", str(out), "--schedules", "1"), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == (1 if d.known_bugs() else 0), resumed.stdout + resumed.stderr
    indices = [r["index"] for r in d.read_schedules()]
    assert indices == list(range(done_before + 1)), "the resumed campaign continues at the schedule in flight"
    assert int(d.read_stats()["distinct_states"]) >= states_before, "states survive the kill"
    assert_gone(out)


def test_fault_free_schedules_check_valid_after_calibration(spec, tmp_path):
    """Without faults the SUT is linearizable, so every schedule's history must check valid:
    each schedule (and the calibration phase before them, which writes too) uses keys of its
    own, since a history is checked from a register nobody has written."""
    out = tmp_path / "campaign"
    args = campaign_args(spec, out, schedules=2)
    args[args.index("--faults") + 1] = "noop"
    proc = subprocess.run(fuzz(*args, "--calibrate", "4"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = CampaignDir(out)
    config = d.config()
    assert config.calibration is not None and config.calibration.windows >= 3 and 0 < config.threshold <= 1
    assert (out / "runs" / "calibration" / "history.edn").stat().st_size > 0
    schedules = d.read_schedules()
    assert len(schedules) == 2
    for record in schedules:
        assert record["history"]["valid"] is True, record["history"]
    assert not d.known_bugs()
    assert_gone(out)


def test_no_process_carries_the_api_token_in_its_command_line(spec, tmp_path):
    """The mediator's token reaches it in a 0600 file of the run's state directory, which
    goes with the run: while the campaign runs, no /proc/*/cmdline holds the token."""
    from mallory.campaign.observed import TOKEN_FILE
    from mallory.cluster.registry import load_run

    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*campaign_args(spec, out, schedules=1)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        d = CampaignDir(out)
        deadline = time.monotonic() + 180
        while "cluster_run" not in d.read_stats():  # written after the first step
            assert proc.poll() is None and time.monotonic() < deadline, "no step was taken"
            time.sleep(0.2)
        token_file = load_run(d.read_stats()["cluster_run"]).state_dir / TOKEN_FILE
        token = token_file.read_bytes()
        assert len(token) == 32 and token_file.stat().st_mode & 0o777 == 0o600
        carriers = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if token in cmdline.read_bytes():
                    carriers.append(cmdline.parent.name)
            except OSError:
                pass  # gone meanwhile
        assert not carriers, f"processes with the token in argv: {carriers}"
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        assert not token_file.exists(), "the token file goes with the run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_gone(out)


def _journaled_pid(run: str, node: str, name: str) -> int:
    """The pid of the latest process named `name` on `node` in the run's journal."""
    from mallory.cluster.registry import load_run

    return [int(e["proc"]) for e in load_run(run).entries() if e.get("node") == node and e.get("name") == name][-1]


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the campaign ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_observer_is_restarted_and_its_gap_is_unobserved(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*campaign_args(spec, out, schedules=2)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    d = CampaignDir(out)
    _wait_for(proc, lambda: "cluster_run" in d.read_stats(), "the first step")
    run = d.read_stats()["cluster_run"]
    victim = _journaled_pid(run, "n2", "observer")
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    assert f"the observer of n2 (pid {victim})" in stderr and "restarting it" in stderr
    gaps = [(r["index"], gap) for r in d.read_schedules() for gap in r.get("unobserved", [])]
    assert gaps and all(gap["restarted"] == ["observer n2"] for _, gap in gaps), gaps
    for record in d.read_schedules():
        if record.get("unobserved"):
            assert record["findings"] == [], "no finding is blamed on a schedule with a gap"
        for step in record["steps"]:
            if step.get("unobserved"):
                assert step["state"] is None and step["reward"] is None
    assert_gone(out)


def test_a_killed_mediator_ends_the_campaign_which_resume_continues(spec, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen(fuzz(*campaign_args(spec, out, schedules=4)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    d = CampaignDir(out)
    _wait_for(proc, lambda: d.schedules_done() >= 1, "the first schedule")
    victim = _journaled_pid(d.read_stats()["cluster_run"], "gw", "mediator")
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 69, stdout + stderr
    assert f"the mediator (pid {victim}) was killed by SIGKILL" in stderr and f"--resume {out}" in stderr, stderr
    assert_gone(out)  # the campaign removed its cluster on the way out
    done = d.schedules_done()
    resumed = subprocess.run(fuzz("--resume", str(out), "--schedules", "1"), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [r["index"] for r in d.read_schedules()] == list(range(done + 1)), "the dropped schedule is redone"
    assert_gone(out)
