"""How much of a step's window each fault's enactment and heal take: the learner's
window is 2.5 s by default, and a fault that takes a second to enact (or to verify) eats
into what the window can observe.

Run as root: `.venv/bin/python bench/bench_nemesis_enact.py [--repeats 3]`. It brings up
a 3-node Redis replica set in network namespaces with `mallory mediator` in the gateway
and the clock/disk controls preloaded, enacts and heals every label of the catalogue
`--repeats` times (a reset after each), prints the median enact and heal times, their
ratio to `noop` measured in the same run, and the share of a 2.5 s window they take;
then removes the run. Numbers on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.cluster.netns import NetnsCluster  # noqa: E402
from mallory.mediator.client import MediatorClient  # noqa: E402
from mallory.suts.redis.replication import RedisReplicationAdapter  # noqa: E402
from nemesis.faults.base import FaultContext  # noqa: E402
from nemesis.faults.controls import NodeControls  # noqa: E402
from nemesis.nemesis import Nemesis  # noqa: E402

TOKEN = "bench-token"
WINDOW_S = 2.5


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (network namespaces)")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NetnsCluster.up(f"be-{uuid.uuid4().hex[:6]}", 3, data_root=Path(tmp))
        try:
            ready = cluster.data_dir("gw") / "ready"
            cluster.spawn("gw", [sys.executable, "-m", "mallory.cli", "mediator", "--run", cluster.run,
                                 "--ready-file", str(ready)], name="mediator", cwd=Path(__file__).resolve().parents[1],
                          env={"MALLORY_TOKEN": TOKEN})
            wait(ready.exists, 20, "the mediator")
            adapter = RedisReplicationAdapter(cluster, port=6379)
            controls = NodeControls(cluster.record, cluster.nodes).prepare()
            adapter.add_env_overlay(controls)
            for node in cluster.nodes:
                adapter.start(node)
            for node in cluster.nodes:
                adapter.wait_ready(node)
            mediator = MediatorClient(cluster.layout.gateway_control_address, 7100, TOKEN)
            nemesis = Nemesis(FaultContext(cluster, adapter, mediator, controls))
            rows = []
            for label in nemesis.actions():
                enacts, heals = [], []
                for r in range(args.repeats):
                    t0 = time.perf_counter()
                    report = nemesis.enact(label, random.Random(r))
                    t1 = time.perf_counter()
                    nemesis.heal(report)
                    t2 = time.perf_counter()
                    enacts.append(t1 - t0)
                    heals.append(t2 - t1)
                    if not nemesis.reset().healthy:
                        raise SystemExit(f"reset after {label} left the cluster unhealthy")
                rows.append((label, statistics.median(enacts), statistics.median(heals)))
        finally:
            cluster.down()
    base = dict((label, (e, h)) for label, e, h in rows)["noop"]
    print(f"enact/heal time per fault on a 3-node Redis cluster (median of {args.repeats}); "
          f"ratios against noop ({base[0] * 1e6:.0f} us), share of a {WINDOW_S} s window")
    print(f"{'label':26} {'enact ms':>9} {'x noop':>9} {'% window':>9} {'heal ms':>9}")
    for label, e, h in rows:
        print(f"{label:26} {e * 1e3:9.1f} {e / base[0]:9.0f} {100 * e / WINDOW_S:8.1f}% {h * 1e3:9.1f}")
    worst = max(rows, key=lambda row: row[1])
    print(f"slowest enactment: {worst[0]} {worst[1] * 1e3:.0f} ms ({100 * worst[1] / WINDOW_S:.0f}% of a window)")


if __name__ == "__main__":
    main()
