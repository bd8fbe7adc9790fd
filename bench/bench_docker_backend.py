"""What the docker backend costs a fault step, against the netns backend in the same run.

The operations a step is made of: start a process in a node (spawn, until its pid is
known), kill it (signal + wait), and run a short command to completion (exec: the disk
and clock probes). Both backends do each op N times on one node; printed: median ms per op
and the docker/netns ratio. Needs root: it starts its own dockerd in a network namespace
(tests/live/docker/daemon.py) and a one-node compose project from `mallory compose`.

    .venv/bin/python bench/bench_docker_backend.py [N]
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.cluster.compose import to_yaml  # noqa: E402
from mallory.cluster.docker import DockerCluster, docker_client  # noqa: E402
from mallory.cluster.netns import NetnsCluster  # noqa: E402
from mallory.commands.campaign import compose_command, ensure_base_image  # noqa: E402
from mallory.commands.compose import generate  # noqa: E402
from tests.live.docker.daemon import start_daemon, stop_daemon  # noqa: E402

SETTINGS = {"duration": "1m", "policy": "random", "seed": 0, "faults": "", "workload": "register",
            "schedules": 1, "steps": 1, "window": 1.0, "reset": 1.0}


def measure(cluster, n: int) -> dict[str, float]:
    spawn, kill, run = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        proc = cluster.spawn("n1", ["sleep", "100"], name=f"bench{i}")
        t1 = time.perf_counter()
        cluster.signal(proc, signal.SIGKILL)
        assert cluster.wait(proc, 10) is not None
        t2 = time.perf_counter()
        cluster.exec("n1", ["true"])
        t3 = time.perf_counter()
        spawn.append(t1 - t0)
        kill.append(t2 - t1)
        run.append(t3 - t2)
    return {op: statistics.median(v) * 1000 for op, v in (("spawn", spawn), ("kill+wait", kill), ("exec", run))}


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    tmp = Path(tempfile.mkdtemp(prefix="mdkb"))
    netns = NetnsCluster.up(f"bn-{uuid.uuid4().hex[:6]}", 1, state_root=tmp / "nstate", data_root=tmp / "ndata")
    try:
        base = measure(netns, n)
    finally:
        netns.down()
    daemon = start_daemon()
    try:
        ensure_base_image(docker_client(daemon.url))
        out, project = tmp / "proj", f"bb{uuid.uuid4().hex[:6]}"
        generate(sut=REPO / "suts/example/example.toml", nodes=1, out=out, project=project, subnet="10.215",
                 run_dir=tmp / "run", docker_socket=str(daemon.socket), settings=SETTINGS)
        (out / "idle.yml").write_text(to_yaml({"version": "2.4", "services": {"mediator": {
            "command": ["tini", "-s", "--", "sleep", "infinity"], "restart": "no",
            "healthcheck": {"test": ["CMD", "true"]}}}}).lstrip("\n"))
        compose = [*compose_command(), "--project-directory", str(out), "-f", str(out / "docker-compose.yml"),
                   "-f", str(out / "idle.yml"), "-p", project]
        subprocess.run([*compose, "up", "-d", "--build"], env=daemon.env(), check=True, capture_output=True)
        try:
            cluster = DockerCluster.up(f"bd-{uuid.uuid4().hex[:6]}", project, docker_url=daemon.url,
                                       state_root=tmp / "dstate", data_root=tmp / "run")
            try:
                docker = measure(cluster, n)
            finally:
                cluster.down()
        finally:
            subprocess.run([*compose, "down", "--volumes", "--timeout", "5"], env=daemon.env(), capture_output=True)
    finally:
        stop_daemon(daemon)
        subprocess.run(["rm", "-rf", str(tmp)])
    print(f"median ms per op over {n} (same run; the machine may be shared, compare the ratios)")
    print(f"{'op':12} {'netns':>8} {'docker':>8} {'ratio':>7}")
    for op in base:
        print(f"{op:12} {base[op]:8.2f} {docker[op]:8.2f} {docker[op] / base[op]:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
