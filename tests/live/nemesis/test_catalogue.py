"""Every fault in the catalogue enacted and healed once against a live cluster: four Redis
nodes (a primary and three replicas) in network namespaces, the real mediator in the
gateway, the SUTs started with the clock/disk preload env.

Each effect is checked independently of the nemesis's report: datagrams between the
namespaces (cut, delayed, duplicated links), /proc (killed, stopped, paused), the SUT's own answers
(Redis TIME for its wall clock, SAVE for its disk, INFO for its role).
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid
from itertools import permutations

import pytest
import redis

from mallory.cluster.netns import NetnsCluster
from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.readiness import tcp_open
from mallory.mediator.client import MediatorClient
from mallory.suts.redis.replication import RedisReplicationAdapter
from nemesis.faults.base import FaultContext
from nemesis.faults.controls import NodeControls
from nemesis.faults.preloaded import missing_library
from nemesis.nemesis import Nemesis, default_families
from tests.live.netns_helpers import (
    TOKEN,
    MediatorProcess,
    as_links,
    check_links,
    count_delivered,
    udp_rtts,
)
from tests.live.stack import enact_measurably

pytestmark = pytest.mark.timeout(300)

NODES = ["n1", "n2", "n3", "n4"]
ROLES = ["master", "slave", "slave", "slave"]  # n1 the primary, as the SUT starts
ALL_LINKS = list(permutations(NODES, 2))
CATALOGUE = [
    f"{f.family}:{s}" for f in default_families() for s in f.specs if f"{f.family}:{s}" != "membership:remove"
]


def node_redis(cluster: NetnsCluster, node: str) -> redis.Redis:
    return redis.Redis(host=cluster.node_address(node), port=6379, socket_timeout=3, socket_connect_timeout=2)


def sut_clock_offset(cluster: NetnsCluster, node: str) -> float:
    """The SUT's own wall clock (Redis TIME) minus ours, in seconds."""
    r = node_redis(cluster, node)
    try:
        t0 = time.time()
        sec, usec = r.time()
        t1 = time.time()
    finally:
        r.close()
    return sec + usec / 1e6 - (t0 + t1) / 2


def sut_save(cluster: NetnsCluster, node: str) -> tuple[bool, float]:
    """Ask the SUT to write its snapshot (fwrite + fsync in its data dir): ok?, seconds."""
    r = node_redis(cluster, node)
    t0 = time.monotonic()
    try:
        r.save()
        ok = True
    except redis.ResponseError:
        ok = False
    finally:
        r.close()
    return ok, time.monotonic() - t0


def role(cluster: NetnsCluster, node: str) -> str:
    r = node_redis(cluster, node)
    try:
        return r.info("replication")["role"]
    finally:
        r.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cluster = NetnsCluster.up(f"nm-{uuid.uuid4().hex[:6]}", len(NODES), data_root=tmp_path_factory.mktemp("nemrun"))
    try:
        mediator = MediatorProcess(cluster).start()
        adapter = RedisReplicationAdapter(cluster, port=6379, client_timeout=1.0)
        controls = NodeControls(cluster.record, cluster.nodes).prepare()
        adapter.add_env_overlay(controls)
        for node in cluster.nodes:
            adapter.start(node)
        for node in cluster.nodes:
            adapter.wait_ready(node)
        client = MediatorClient(cluster.layout.gateway_control_address, mediator.port, TOKEN)
        ctx = FaultContext(cluster, adapter, client, controls)
        yield cluster, ctx, Nemesis(ctx)
    finally:
        cluster.down()
    assert not (cluster.record.run_dir / "faults").exists()  # journaled, so cleanup removed it


@pytest.fixture(autouse=True)
def healthy(live):
    """Every test starts from the healthy cluster the module began with, whatever the test
    before left (one that failed midway leaves its fault in force): reset, n1 made the
    primary again, and checked. What cannot be put right fails this test's setup, saying
    what is wrong, instead of its assertions."""
    cluster, ctx, nemesis = live
    try:
        problems = nemesis.reset().problems
        if [role(cluster, n) for n in NODES] != ROLES:
            ctx.adapter.promote("n1")
            for node in NODES:  # a replica is ready once its link to the primary is up
                ctx.adapter.wait_ready(node, 20)
            if [role(cluster, n) for n in NODES] != ROLES:
                problems.append(f"roles {[role(cluster, n) for n in NODES]}, not {ROLES}")
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is the cluster that is wrong
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        pytest.fail(f"the shared cluster is not healthy before this test (left so by an earlier one?): {problems}",
                    pytrace=False)


def test_the_catalogue_offered_to_the_learner(live):
    _, _, nemesis = live
    assert nemesis.actions() == [*CATALOGUE, "noop"]
    assert "cannot remove" in nemesis.refused["membership:remove"]
    assert "partition:minority-third" in nemesis.actions()  # 4 nodes: one node is < n/3


@pytest.mark.parametrize("label", CATALOGUE)
def test_fault_enacted_verified_and_healed(live, label):
    cluster, ctx, nemesis = live
    family, _, spec = label.partition(":")
    pids = {n: ctx.adapter.process(n).pid for n in NODES}
    log_sizes = {n: ctx.adapter.log_paths(n)[0].stat().st_size for n in NODES}

    if label == "disk:lose-unsynced":
        # Every node's processes write 4 synced bytes, then 5 unsynced ones, to a data file.
        for node in NODES:
            env = [f"{k}={v}" for k, v in ctx.controls.env(node).items()]
            path = cluster.data_dir(node) / "unsynced.bin"
            script = f"dd if=/dev/zero of={path} bs=4 count=1 conv=fsync status=none && echo lost >> {path}"
            cluster.exec(node, ["env", *env, "sh", "-c", script])
            assert path.stat().st_size == 9

    report, strobe = enact_measurably(nemesis, label)
    assert report.verified or label == "membership:promote-paused", report  # see below
    assert report.action == label

    # -- the effect, seen without the nemesis ---------------------------------------------
    if family == "partition":
        assert report.links
        check_links(cluster, as_links(report))
        if spec == "primaries":
            assert as_links(report) == {(a, b) for a, b in ALL_LINKS if "n1" in (a, b)}
    elif family == "drop":
        check_links(cluster, as_links(report))
    elif family == "duplicate":
        want = {link: 20 if link in as_links(report) else 10 for link in ALL_LINKS}
        assert count_delivered(cluster, ALL_LINKS, n=10, expect=want) == want
    elif family == "delay":
        src, dst = sorted(as_links(report))[0]
        rtt = statistics.median(udp_rtts(cluster, src, dst, n=6))
        assert rtt >= report.params["ms"] * 0.9, rtt  # only one direction may be delayed
        check_links(cluster, set())  # held, not lost: 10 datagrams on every link, delayed or not
    elif family in ("kill", "stop"):
        assert report.nodes
        for node in report.nodes:
            assert proc_state(pids[node]) in (None, "Z")
            with pytest.raises(redis.ConnectionError):
                node_redis(cluster, node).ping()
            if family == "stop":  # Redis without persistence shuts down at once on SIGTERM
                stopped = report.evidence["stop"][node]
                assert stopped["exited_by_itself"] and stopped["status"] == 0, stopped
                assert stopped["seconds"] < ctx.adapter.stop_timeout
    elif family == "pause":
        assert report.nodes
        for node in NODES:
            assert (proc_state(pids[node]) == "T") == (node in report.nodes)
    elif family == "clock" and spec == "bump":
        for node in NODES:
            want = report.params["delta_s"].get(node, 0.0)
            assert abs(sut_clock_offset(cluster, node) - want) < 0.3, (node, want)
    elif family == "clock" and spec == "strobe":
        node = report.nodes[0]
        delta, period = report.params["delta_s"], report.params["period_s"]
        seen = []
        deadline = time.monotonic() + 8 * period + 0.5
        while time.monotonic() < deadline:
            seen.append(sut_clock_offset(cluster, node))
            time.sleep(period / 4)
        assert any(abs(s - delta) < 0.3 for s in seen) and any(abs(s) < 0.3 for s in seen), (delta, period, seen)
    elif family == "clock" and spec == "reset":
        # every SUT clock true, and still so after two of the strobe's periods
        seen = []
        deadline = time.monotonic() + 2 * strobe.params["period_s"] + 0.5
        while time.monotonic() < deadline:
            seen += [sut_clock_offset(cluster, n) for n in NODES]
        assert all(abs(s) < 0.3 for s in seen), seen
    elif label == "disk:lose-unsynced":
        node = report.nodes[0]
        assert proc_state(pids[node]) in (None, "Z")  # crashed...
        for n in NODES:  # ...and only its unsynced bytes are gone
            assert (cluster.data_dir(n) / "unsynced.bin").read_bytes() == (b"\0" * 4 if n == node else b"\0" * 4 + b"lost\n")
    elif family == "disk":
        node = report.nodes[0]
        ok, seconds = sut_save(cluster, node)
        if spec == "slow":
            assert ok and seconds >= 0.045, seconds  # the fsync alone waits 50 ms
        else:
            assert not ok
            errtext = "No space left on device" if spec == "enospc" else "Input/output error"
            with open(ctx.adapter.log_paths(node)[0]) as f:
                f.seek(log_sizes[node])
                log = f.read()
            assert "Write error saving DB on disk" in log and errtext in log, log
        for other in NODES:
            if other != node:
                assert sut_save(cluster, other)[0]  # only the target's disk is faulty
    elif family == "membership":
        node = report.nodes[0]
        assert node != "n1"
        if spec == "promote-paused":  # a paused Redis answers nothing: the failover is refused, not faked
            assert proc_state(pids[node]) == "T" and "cannot make" in report.evidence["transfer_refused"]
        else:  # REPLICAOF NO ONE reaches it through the gateway, cut off from its peers or not
            assert role(cluster, node) == "master"
        if spec == "promote-cut-off":
            check_links(cluster, as_links(report))
        elif spec == "promote-lagging":
            src, dst = sorted(as_links(report))[0]
            assert statistics.median(udp_rtts(cluster, src, dst, n=6)) >= report.params["ms"] * 0.9

    nemesis.heal(report)
    assert report.healed

    # -- healed, again seen without the nemesis ---------------------------------------------
    if family in ("partition", "drop", "duplicate", "delay"):
        # the firewall's own per-link count covers the datagrams sent above (10 per link)
        affected = report.heal_evidence["packets_affected"]
        assert set(affected) == set(report.links) and all(n >= 10 for n in affected.values()), affected
        check_links(cluster, set())
    if family in ("kill", "stop"):
        for node in report.nodes:
            assert proc_state(ctx.adapter.process(node).pid) not in (None, "Z", "T")  # a new process, alive
            ctx.adapter.wait_ready(node, 20)
            assert node_redis(cluster, node).ping()
    if family == "pause":
        assert all(proc_state(pids[n]) in ("S", "R") for n in NODES)
    if family == "clock":
        assert all(abs(sut_clock_offset(cluster, n)) < 0.3 for n in NODES)
    if label == "disk:lose-unsynced":
        node = report.nodes[0]
        ctx.adapter.wait_ready(node, 20)  # started again
        assert node_redis(cluster, node).ping()
        for n in NODES:
            (cluster.data_dir(n) / "unsynced.bin").unlink()
    elif family == "disk":
        assert all(sut_save(cluster, n)[0] for n in NODES)
        if spec != "slow":
            assert report.heal_evidence[report.nodes[0]]["injected_by_sut"] >= 1
    if label in ("membership:promote-cut-off", "membership:promote-lagging"):
        check_links(cluster, set())
        ctx.adapter.promote("n1")  # these heals lift the condition only: the old primary is put back by hand
    if family == "membership":
        deadline = time.monotonic() + 10
        while role(cluster, "n1") != "master" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [role(cluster, n) for n in NODES] == ["master", "slave", "slave", "slave"]
    # a reset after this fault's heal leaves a healthy cluster (the next test checks it again)
    reset = nemesis.reset()
    assert reset.healthy, reset.to_json()
    assert nemesis.health_problems() == []


def test_reset_heals_a_pile_of_faults_and_leaves_nothing(live):
    cluster, ctx, nemesis = live
    rng = random.Random(5)
    for label in ["partition:one", "kill:one", "pause:minority", "clock:bump", "disk:eio", "delay:all", "duplicate:pair"]:
        assert nemesis.enact(label, rng).verified
    assert len(nemesis.health_problems()) >= 3
    reset = nemesis.reset()
    assert reset.healthy, reset.to_json()
    assert len(reset.healed) == 7 and reset.restarted == [] and reset.resumed == []
    assert ctx.mediator.rules() == []
    check_links(cluster, set())
    for node in NODES:
        ctx.adapter.wait_ready(node, 20)
        assert proc_state(ctx.adapter.process(node).pid) in ("S", "R")
        assert abs(sut_clock_offset(cluster, node)) < 0.3
        assert sut_save(cluster, node)[0]


def test_reset_restarts_and_resumes_what_was_done_behind_its_back(live):
    cluster, ctx, nemesis = live
    ctx.adapter.kill("n3")
    ctx.adapter.pause("n2")
    ctx.mediator.drop([("n1", "n4")])
    ctx.controls.set_clock("n4", 30.0)
    reset = nemesis.reset()
    assert reset.healthy, reset.to_json()
    assert reset.restarted == ["n3"] and reset.resumed == ["n2"]
    check_links(cluster, set())
    assert abs(sut_clock_offset(cluster, "n4")) < 0.3


def test_refused_faults(live):
    cluster, ctx, _ = live
    with pytest.raises(MalloryError, match="membership:remove refused"):
        Nemesis(ctx, enabled=["membership:remove"])
    with pytest.raises(MalloryError, match="unknown spec"):
        Nemesis(ctx, enabled=["partition:halves"])
    with pytest.raises(MalloryError, match="unknown fault family"):
        Nemesis(ctx, enabled=["flood"])
    picked = Nemesis(ctx, enabled=["partition", "kill:one"])
    assert picked.actions() == [f"partition:{s}" for s in default_families()[0].specs] + ["kill:one", "noop"]
    with pytest.raises(MalloryError, match="not enabled"):
        picked.enact("pause:one", random.Random(0))
    # No mediator, no network faults; no controls, no clock or disk faults.
    bare = Nemesis(FaultContext(cluster, ctx.adapter, None, None))
    assert "partition:one" not in bare.actions() and "clock:bump" not in bare.actions()
    assert "mediator" in bare.refused["delay:one"] and "preload" in bare.refused["disk:eio"]
    assert "kill:one" in bare.actions()


def test_a_sut_started_without_the_preload_env_is_refused_clock_and_disk(live):
    cluster, ctx, _ = live
    plain = RedisReplicationAdapter(cluster, port=6380, client_timeout=1.0)
    plain.primary = "n1"
    plain.command = lambda node: ["redis-server", "--bind", cluster.node_address(node), "--port", "6380",
                                  "--save", "", "--appendonly", "no", "--dir", str(cluster.data_dir(node))]
    proc = cluster.spawn("n1", plain.command("n1"), name="plain-redis")
    plain._procs["n1"] = proc
    try:
        deadline = time.monotonic() + 10
        while not tcp_open(cluster.node_address("n1"), 6380) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.basename(os.readlink(f"/proc/{proc.pid}/exe")).startswith("redis-")  # no longer `ip`
        other = FaultContext(cluster, plain, ctx.mediator, ctx.controls)
        with pytest.raises(MalloryError, match="clock:bump refused.*libmallory_faults"):
            Nemesis(other, enabled=["clock:bump"])
        with pytest.raises(MalloryError, match="disk:eio refused.*libmallory_faults"):
            Nemesis(other, enabled=["disk:eio"])
    finally:
        cluster.signal(proc, 9)
        cluster.wait(proc, 5)


def test_healing_one_network_fault_leaves_the_others_in_force(live):
    cluster, ctx, nemesis = live
    delay = nemesis.enact("delay:all", random.Random(1))
    one = nemesis.enact("partition:one", random.Random(2))
    majority = nemesis.enact("partition:majority", random.Random(3))
    check_links(cluster, as_links(one) | as_links(majority))
    nemesis.heal(one)
    check_links(cluster, as_links(majority))  # its links stay cut, shared or not
    rules = {(r["src"], r["dst"]): r for r in ctx.mediator.rules()}
    assert len(rules) == len(ALL_LINKS) and all(r["delay_ms"] == 50 for r in rules.values())  # delay put back
    nemesis.heal(majority)
    check_links(cluster, set())
    assert all(r["delay_ms"] == 50 and not r["drop"] for r in ctx.mediator.rules())
    nemesis.heal(delay)
    assert ctx.mediator.rules() == []
    assert nemesis.active == []


def test_a_just_restarted_sut_still_takes_clock_faults(live):
    """Right after a restart the node's pid may still be the launcher (before its execve):
    the check waits for the shim to be mapped instead of refusing the fault."""
    cluster, ctx, nemesis = live
    for _ in range(3):
        ctx.adapter.kill("n1")
        ctx.adapter.start("n1")
        assert missing_library(ctx, "clock") is None
    ctx.adapter.wait_ready("n1")
    assert nemesis.reset().healthy


def test_restart_all_brings_up_every_node_anew(live):
    cluster, ctx, nemesis = live
    before = {n: ctx.adapter.process(n).pid for n in NODES}
    ctx.adapter.pause("n2")
    cut = nemesis.enact("partition:one", random.Random(0))
    report = nemesis.restart_all()
    assert report.healthy, report.to_json()
    assert report.restarted == list(NODES)
    assert report.healed == [cut.action] and nemesis.active == [] and ctx.mediator.rules() == []
    check_links(cluster, set())
    after = {n: ctx.adapter.process(n).pid for n in NODES}
    assert all(after[n] != before[n] for n in NODES)
    assert all(ctx.adapter.is_running(n) for n in NODES)
