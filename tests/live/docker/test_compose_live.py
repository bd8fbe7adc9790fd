"""The compose deployment for real: a docker daemon of the test's own (in a network namespace
it creates), the base image from the cached mmdebstrap tarball, the example SUT's project
from `mallory compose`, and `mallory campaign up|status|fetch|down`:

- a short campaign (one schedule of four steps) runs in the mediator container with faults
  enacted and verified, its results land on the `campaign` volume;
- its process killed after the first step, the restart policy brings it back and it resumes;
- `down` keeps the results' volume and nothing else; `up` again resumes the campaign on it;
  `down --volumes` leaves nothing.

The base image tarball is built once (deploy/compose/build-base.sh, cached under build/)
and reused by later runs; its build time is printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mallory import paths
from mallory.cluster.docker import PROJECT_LABEL
from mallory.commands.compose import generate
from mallory.polling import wait_until

pytestmark = pytest.mark.timeout(1200)

REPO = paths.HOME
EXAMPLE = REPO / "suts" / "example"


def mallory(daemon, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "mallory.cli", *argv], capture_output=True, text=True,
                            env=daemon.env(), cwd=REPO, timeout=600)
    if check:
        assert result.returncode == 0, f"mallory {' '.join(argv)}: {result.stdout}\n{result.stderr}"
    return result


def plot_rows(volume: Path) -> list[str]:
    return [line for line in (volume / "plot_data").read_text().splitlines() if line and not line.startswith("#")]


def project_containers(client, project: str) -> list:
    return client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})


def test_a_short_campaign_in_compose_and_down(daemon, client, tmp_path):
    project = f"mc{uuid.uuid4().hex[:6]}"
    out = tmp_path / "proj"
    generate(
        sut=EXAMPLE / "example.toml", nodes=3, out=out, project=project, docker_socket=str(daemon.socket),
        settings={"duration": "10m", "policy": "qlearning", "seed": 3, "faults": "partition,kill,pause,clock",
                  "workload": "register", "schedules": 1, "steps": 4, "window": 1.5, "reset": 2.0},
    )
    networks_before = {n.name for n in client.networks.list()}
    volumes_before = {v.name for v in client.volumes.list()}
    t0 = time.monotonic()
    mallory(daemon, "campaign", "up", str(out))
    up_s = time.monotonic() - t0
    try:
        mediator = next(c for c in project_containers(client, project) if c.name.endswith("mediator_1")
                        or c.labels.get("com.docker.compose.service") == "mediator")

        volume = Path(client.volumes.get(f"{project}_campaign").attrs["Mountpoint"])

        # A crash of the campaign (its process killed, not the container stopped): the
        # restart policy starts it again, and it resumes from the volume.
        wait_until(lambda: (volume / "plot_data").exists() and len(plot_rows(volume)) >= 1, 300,
                   "the campaign's first step")
        mediator.reload()
        pid = mediator.attrs["State"]["Pid"]
        assert pid > 0, "the campaign ended before it could be killed"  # (kill(0) is our group)
        os.kill(pid, signal.SIGKILL)

        logs = wait_finished(mediator, restarts=1)
        campaign_s = time.monotonic() - t0 - up_s
        print(f"\nimage build + up {up_s:.1f} s, campaign {campaign_s:.1f} s", file=sys.stderr)

        assert "--resume /campaign" in logs, logs[-4000:]

        # -- the results, on the campaign volume ------------------------------------------
        config = json.loads((volume / "campaign.json").read_text())
        assert config["backend"] == "docker" and config["nodes"] == 3 and config["seed"] == 3
        schedule = json.loads((volume / "schedules" / "000000.json").read_text())
        steps = schedule["steps"]
        assert len(steps) == 4
        faults = [s for s in steps if s["action"] != "noop"]
        assert faults, steps
        for step in faults:
            assert step["report"]["verified"], step["report"]
            assert step["action"].split(":")[0] in ("partition", "kill", "pause", "clock")
        assert schedule["reset"]["healthy"], schedule["reset"]
        stats = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                       (volume / "fuzzer_stats").read_text().splitlines())}
        # the kill may land after the schedule's last step: then the restart runs one more
        assert int(stats["schedules_done"]) >= 1 and int(stats["steps_done"]) >= 4
        history = (volume / "runs" / "000000" / "history.jsonl").read_text().splitlines()
        assert any('"ok"' in line for line in history), history[:5]
        assert (volume / "events" / "events.jsonl").stat().st_size > 0
        # the observers' SUT process logs are in the run volume, the node containers still up
        assert all(c.status == "running" for c in project_containers(client, project) if c.id != mediator.id)

        status = mallory(daemon, "campaign", "status", str(out)).stdout
        assert "exited" in status and "steps_done" in status, status
        fetched = tmp_path / "fetched"
        mallory(daemon, "campaign", "fetch", str(out), "--to", str(fetched))
        assert json.loads((fetched / "campaign.json").read_text()) == config
    finally:
        mallory(daemon, "campaign", "down", str(out), check=False)

    # -- down: containers and networks gone, the results' volume kept ---------------------------
    assert project_containers(client, project) == []
    assert {n.name for n in client.networks.list()} == networks_before
    assert {v.name for v in client.volumes.list()} == volumes_before | {f"{project}_campaign", f"{project}_run"}

    # -- up again: the campaign on the volume resumes and runs one more schedule ---------------
    try:
        mallory(daemon, "campaign", "up", str(out))
        mediator = next(c for c in project_containers(client, project)
                        if c.labels.get("com.docker.compose.service") == "mediator")
        logs = wait_finished(mediator, restarts=0)
        assert "--resume /campaign" in logs.splitlines()[0], logs[-4000:]
        resumed = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                         (volume / "fuzzer_stats").read_text().splitlines())}
        assert int(resumed["schedules_done"]) == int(stats["schedules_done"]) + 1
        assert json.loads((volume / "campaign.json").read_text())["seed"] == 3
    finally:
        mallory(daemon, "campaign", "down", str(out), "--volumes")
    assert project_containers(client, project) == []
    assert {n.name for n in client.networks.list()} == networks_before
    assert {v.name for v in client.volumes.list()} == volumes_before


def wait_finished(mediator, restarts: int) -> str:
    """Wait for the campaign in the mediator container to end well; its output."""

    def finished() -> bool:
        mediator.reload()
        # restarts beyond those the test caused: a campaign failing again and again
        assert mediator.attrs["RestartCount"] <= restarts, mediator.logs().decode(errors="replace")[-4000:]
        return mediator.status == "exited"

    wait_until(finished, 600, "the campaign in the mediator container to finish")
    logs = mediator.logs().decode(errors="replace")
    assert mediator.attrs["RestartCount"] == restarts and mediator.attrs["State"]["ExitCode"] == 0, logs[-4000:]
    return logs
