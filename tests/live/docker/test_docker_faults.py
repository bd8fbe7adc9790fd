"""The fault catalogue on the docker backend, driven from the host through the Engine API:
the example SUT on three node containers of a compose project, the real mediator in the
mediator container, the SUT started with the clock/disk preload env.

As in tests/live/nemesis/test_catalogue.py, each effect is checked without the nemesis:
datagrams between the node containers' namespaces (cut, delayed, duplicated links), /proc
(killed, paused), `date` and `dd` run in the node under the SUT's environment (clock, disk;
a strobe sampled in the node until it is seen to flip, a reset until it has stopped it).
And as there, a kill -9 of the controller leaves nothing `mallory cleanup` does not remove.

The project is the one `mallory compose` writes, with a test-only override: the mediator
container idles (this test is the controller, not a campaign in the container), the node
data/logs are a bind mount at the same path on the host, and the source checkout is mounted
read-only in the nodes at its own path (the SUT binary and the fault shim the host built).
"""

from __future__ import annotations

import math
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import textwrap
import uuid
from itertools import permutations
from pathlib import Path

import pytest

from mallory import paths
from mallory.campaign.docker_stack import API_PORT
from mallory.cluster.compose import to_yaml
from mallory.cluster.docker import DockerCluster
from mallory.cluster.registry import proc_state
from mallory.commands.campaign import compose_command
from mallory.commands.compose import generate
from mallory.errors import MalloryError
from mallory.harness.session import start_all, teardown_all
from mallory.mediator.client import MediatorClient
from mallory.polling import wait_until
from mallory.suts.registry import make_adapter
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import NodeControls
from nemesis.nemesis import Nemesis
from tests.live.netns_helpers import (
    as_links,
    check_links,
    count_delivered,
    in_netns,
    udp_rtts,
)
from tests.live.stack import enact_measurably

pytestmark = pytest.mark.timeout(900)

REPO = paths.HOME
EXAMPLE = REPO / "suts" / "example"
NODES = ["n1", "n2", "n3"]
ALL_LINKS = list(permutations(NODES, 2))
TOKEN = "docker-fault-test"
LABELS = ["partition:one", "partition:majority", "partition:majorities-ring", "partition:bridge",
          "drop:pair", "drop:all", "duplicate:one", "duplicate:pair", "delay:one", "delay:all",
          "kill:one", "kill:minority", "kill:all", "pause:one", "pause:minority", "pause:all",
          "clock:bump", "clock:strobe", "clock:reset",
          "disk:eio", "disk:enospc", "disk:fsync", "disk:slow", "disk:lose-unsynced"]


class NodeNamespaces:
    """The node containers' network namespaces under /run/netns (`ip netns attach`), so
    the netns tests' UDP helpers reach into them."""

    def __init__(self, cluster: DockerCluster) -> None:
        self.cluster = cluster
        self.names = {n: f"mallory-dk-{uuid.uuid4().hex[:6]}-{n}" for n in cluster.nodes}
        for node, name in self.names.items():
            subprocess.run(["ip", "netns", "attach", name, str(cluster.init_pid(node))], check=True)

    @property
    def nodes(self) -> list[str]:
        return self.cluster.nodes

    def namespace(self, node: str) -> str:
        return self.names[node]

    def node_address(self, node: str) -> str:
        return self.cluster.node_address(node)

    def close(self) -> None:
        for name in self.names.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def compose(daemon, out: Path, project: str, *argv: str) -> None:
    cmd = [*compose_command(), "--project-directory", str(out), "-f", str(out / "docker-compose.yml"),
           "-f", str(out / "test-override.yml"), "-p", project, *argv]
    result = subprocess.run(cmd, env=daemon.env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def project(daemon, client, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dkfaults")
    run_dir = tmp / "run"
    run_dir.mkdir()
    name = f"mf{uuid.uuid4().hex[:6]}"
    out = tmp / "proj"
    generate(sut=EXAMPLE / "example.toml", nodes=len(NODES), out=out, project=name, subnet="10.214", run_dir=run_dir,
             docker_socket=str(daemon.socket), settings={"duration": "1m", "policy": "random", "seed": 0, "faults": "",
                                                       "workload": "register", "schedules": 1, "steps": 1,
                                                       "window": 1.0, "reset": 1.0})
    override = {"version": "2.4", "services": {
        "mediator": {"command": ["tini", "-s", "--", "sleep", "infinity"], "restart": "no",
                     "healthcheck": {"test": ["CMD", "true"]}},
        **{n: {"volumes": [f"{REPO}:{REPO}:ro"]} for n in NODES},
    }}
    (out / "test-override.yml").write_text(to_yaml(override).lstrip("\n"))
    compose(daemon, out, name, "up", "-d", "--build")
    try:
        yield name, run_dir, tmp
    finally:
        compose(daemon, out, name, "down", "--volumes", "--timeout", "5")


@pytest.fixture(scope="module")
def live(daemon, project):
    name, run_dir, tmp = project
    cluster = DockerCluster.up(f"dk-{uuid.uuid4().hex[:6]}", name, docker_url=daemon.url,
                               state_root=tmp / "state", data_root=run_dir)
    namespaces = NodeNamespaces(cluster)
    adapter = None
    try:
        mediator = cluster.spawn("gw", ["python3", "-m", "mallory.cli", "mediator",
                                        "--api", f"{cluster.layout.control_address}:{API_PORT}",
                                        *[a for n in cluster.layout.nodes for a in ("--node", f"{n.name}={n.address}")]],
                                 name="mediator", env={"MALLORY_TOKEN": TOKEN})
        # the test thread reaches the control network from inside the daemon's namespace
        with in_netns(daemon.namespace):
            client = MediatorClient(cluster.layout.control_address, API_PORT, TOKEN)

            def serving() -> bool:
                assert cluster.is_running(mediator), mediator.log_path.read_text()
                try:
                    client.status()
                    return True
                except Exception:
                    return False

            wait_until(serving, 60, "the mediator API")
            adapter = make_adapter(str(EXAMPLE / "example.toml"), cluster)
            controls = NodeControls(cluster.record, cluster.nodes).prepare()
            adapter.add_env_overlay(controls)
            start_all(adapter)
            ctx = FaultContext(cluster, adapter, client, controls)
            yield cluster, namespaces, ctx, Nemesis(ctx, enabled=LABELS)
    finally:
        if adapter is not None:
            teardown_all(adapter)
        namespaces.close()
        cluster.down()
    assert not (run_dir / cluster.run / "faults").exists()
    assert all(proc_state(p.pid) in (None, "Z") for p in cluster.processes()) or not cluster.record.state_dir.exists()


def node_clock_offset(ctx: FaultContext, node: str) -> float:
    """`date` in the node under the SUT's preload env, minus our clock (seconds)."""
    import time

    env = [f"{k}={v}" for k, v in ctx.controls.env(node).items()]
    t0 = time.time()
    out = ctx.backend.exec(node, ["env", *env, "date", "+%s.%N"]).stdout
    return float(out.strip()) - (t0 + time.time()) / 2


def node_clock_offsets(ctx: FaultContext, node: str, seconds: float) -> list[float]:
    """The node's wall clock under the SUT's preload env minus the true one, sampled in the
    node for at least `seconds`: each `date` under the env read between two plain ones, so
    neither an exec's overhead nor a busy machine's delays become an error (a sample whose
    plain reads lie more than 0.4 s apart is left out)."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in ctx.controls.env(node).items())
    script = (f"end=$(($(date +%s) + {math.ceil(seconds) + 1})); while [ $(date +%s) -lt $end ]; do "
              f"a=$(date +%s%N); f=$(env {env} date +%s%N); b=$(date +%s%N); echo $a $f $b; done")
    out = ctx.backend.exec(node, ["sh", "-c", script], timeout=seconds + 30).stdout
    samples = []
    for line in out.splitlines():
        before, faked, after = map(int, line.split())
        if after - before < 400_000_000:
            samples.append((faked - (before + after) / 2) / 1e9)
    return samples


def node_disk_seconds(ctx: FaultContext, node: str) -> float:
    """How long a 4 KiB write + fsync in the node's data dir takes under the SUT's env,
    timed inside the node (an exec's own overhead is larger than the fault's delay)."""
    env = [f"{k}={v}" for k, v in ctx.controls.env(node).items()]
    probe = ctx.backend.data_dir(node) / "probe.bin"
    script = (f'a=$(date +%s%N); env {" ".join(env)} dd if=/dev/zero of={probe} bs=4096 count=1 conv=fsync '
              f'status=none; b=$(date +%s%N); rm -f {probe}; echo $((b - a))')
    return int(ctx.backend.exec(node, ["sh", "-c", script]).stdout.strip()) / 1e9


def node_disk_ok(ctx: FaultContext, node: str) -> bool:
    env = [f"{k}={v}" for k, v in ctx.controls.env(node).items()]
    probe = ctx.backend.data_dir(node) / "probe.bin"
    result = ctx.backend.exec(node, ["env", *env, "dd", "if=/dev/zero", f"of={probe}", "bs=4096", "count=1",
                                     "conv=fsync", "status=none"], check=False)
    probe.unlink(missing_ok=True)
    return result.returncode == 0


@pytest.mark.parametrize("label", LABELS)
def test_fault_enacted_verified_and_healed(daemon, live, label):
    cluster, namespaces, ctx, nemesis = live
    family, _, spec = label.partition(":")
    pids = {n: ctx.adapter.process(n).pid for n in NODES}
    with in_netns(daemon.namespace):
        report, strobe = enact_measurably(nemesis, label)
        assert report.verified, report

        if family in ("partition", "drop"):
            assert report.links
            check_links(namespaces, as_links(report))
        elif family == "duplicate":
            want = {link: 20 if link in as_links(report) else 10 for link in ALL_LINKS}
            assert count_delivered(namespaces, ALL_LINKS, n=10, expect=want) == want
        elif family == "delay":
            src, dst = sorted(as_links(report))[0]
            assert statistics.median(udp_rtts(namespaces, src, dst, n=6)) >= report.params["ms"] * 0.9
        elif family == "kill" or label == "disk:lose-unsynced":
            assert report.nodes
            for node in report.nodes:
                assert proc_state(pids[node]) in (None, "Z")
        elif family == "pause":
            for node in NODES:
                assert (proc_state(pids[node]) == "T") == (node in report.nodes)
        elif label == "clock:bump":
            for node in NODES:
                want = report.params["delta_s"].get(node, 0.0)
                assert abs(node_clock_offset(ctx, node) - want) < 0.5, (node, want)
        elif label == "clock:strobe":
            # over 8 periods the node's clock is seen at the delta and at the true time, and
            # nowhere else
            delta, period = report.params["delta_s"], report.params["period_s"]
            seen = node_clock_offsets(ctx, report.nodes[0], 8 * period + 0.5)
            assert any(abs(s - delta) < 0.5 for s in seen) and any(abs(s) < 0.5 for s in seen), (delta, period, seen)
            assert all(min(abs(s - delta), abs(s)) < 0.5 for s in seen), (delta, period, seen)
        elif label == "clock:reset":
            # every node's clock true, and still so after two of the strobe's periods
            for node in NODES:
                seen = node_clock_offsets(ctx, node, 2 * strobe.params["period_s"] + 0.5)
                assert seen and all(abs(s) < 0.5 for s in seen), (node, seen)
        elif label == "disk:slow":
            node = report.nodes[0]
            assert node_disk_seconds(ctx, node) >= 0.045  # the fsync alone waits 50 ms
        elif family == "disk":
            node = report.nodes[0]
            assert [node_disk_ok(ctx, n) for n in NODES] == [n != node for n in NODES]

        nemesis.heal(report)
        assert report.healed
        if family in ("partition", "drop", "duplicate", "delay"):
            check_links(namespaces, set())
        if family == "kill" or label == "disk:lose-unsynced":
            for node in report.nodes:
                ctx.adapter.wait_ready(node, 30)
                assert proc_state(ctx.adapter.process(node).pid) in ("S", "R")
        if family == "pause":
            assert all(proc_state(pids[n]) in ("S", "R") for n in NODES)
        if family == "clock":
            assert all(abs(node_clock_offset(ctx, n)) < 0.5 for n in NODES)
        if family == "disk":
            assert all(node_disk_ok(ctx, n) for n in NODES)
        reset = nemesis.reset()
        assert reset.healthy, reset.to_json()


def test_reset_heals_a_pile_of_faults(daemon, live):
    cluster, namespaces, ctx, nemesis = live
    rng = random.Random(5)
    with in_netns(daemon.namespace):
        for label in ["partition:one", "kill:one", "pause:minority", "clock:bump", "disk:eio", "delay:one"]:
            assert nemesis.enact(label, rng).verified, label
        assert len(nemesis.health_problems()) >= 3
        reset = nemesis.reset()
        assert reset.healthy, reset.to_json()
        assert ctx.mediator.rules() == []
        check_links(namespaces, set())
        for node in NODES:
            assert proc_state(ctx.adapter.process(node).pid) in ("S", "R")
            assert node_disk_ok(ctx, node)


CONTROLLER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from mallory.cluster.docker import DockerCluster
    cluster = DockerCluster.up(sys.argv[1], sys.argv[2], docker_url=sys.argv[3], state_root=Path(sys.argv[4]),
                               data_root=Path(sys.argv[5]))
    for node in cluster.nodes:
        proc = cluster.spawn(node, ["sleep", "1000"], name="orphan")
        print(proc.pid, flush=True)
    print("spawned", flush=True)
    sys.stdin.read()
""")


def test_killed_controller_leaves_nothing_cleanup_does_not_remove(daemon, project):
    name, run_dir, tmp = project
    state = tmp / "state-killed"
    run = f"kc-{uuid.uuid4().hex[:6]}"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, run, name, daemon.url, str(state), str(run_dir)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        lines = []
        while (line := controller.stdout.readline().strip()) != "spawned":
            assert line, "the controller died before spawning"
            lines.append(int(line))
        assert len(lines) == len(NODES) and all(proc_state(pid) in ("S", "R") for pid in lines)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
        assert all(proc_state(pid) in ("S", "R") for pid in lines)  # they outlive their controller
        result = subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], capture_output=True, text=True,
                                env={**os.environ, "MALLORY_STATE_DIR": str(state)}, cwd=REPO)
        assert result.returncode == 0, result.stderr
        wait_until(lambda: all(proc_state(pid) in (None, "Z") for pid in lines), 10, "the orphans to be gone")
        assert not (state / run).exists() and not (run_dir / run / "data").exists()
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(5)


def test_exec_and_spawn_report_exit_statuses_as_the_netns_backend_does(daemon, project):
    """exec: the command's exit code and output, MalloryError under check; spawn + wait: an
    exit code as is, a death by signal N as -N (the Engine's 128+N translated back)."""
    name, run_dir, tmp = project
    cluster = DockerCluster.up(f"ex-{uuid.uuid4().hex[:6]}", name, docker_url=daemon.url,
                               state_root=tmp / "state-exec", data_root=run_dir)
    try:
        done = cluster.exec("n1", ["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
        assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
        with pytest.raises(MalloryError, match=r"failed \(3\): err"):
            cluster.exec("n1", ["sh", "-c", "echo err >&2; exit 3"])
        assert cluster.exec("n2", ["hostname"]).stdout.strip() == "n2"
        exits = cluster.spawn("n1", ["sh", "-c", "sleep 0.5; exit 7"], name="exits")
        assert cluster.wait(exits, 30) == 7
        sleeper = cluster.spawn("n1", ["sleep", "300"], name="sleeper")
        assert cluster.wait(sleeper, 0.2) is None and cluster.is_running(sleeper)
        cluster.signal(sleeper, signal.SIGTERM)
        assert cluster.wait(sleeper, 30) == -signal.SIGTERM
    finally:
        cluster.down()
