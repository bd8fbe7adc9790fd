"""Overhead of observation on the SUT's network, between two nodes of a netns cluster.

Side by side, in one run (so the ratios hold even on a busy machine):
  plain       no observer, no mediator (the veth path through the gateway)
  observers   an observer on both nodes (NFQUEUE on INPUT/OUTPUT), no mediator
  nflog       an observer on both nodes in NFLOG mode (a copy, no verdict), no mediator
  mediator    the mediator's FORWARD firewall, no observers
  both        NFQUEUE observers and mediator: observer -> mediator -> observer
  both-nflog  NFLOG observers and mediator

RTT: a TCP request/response ping-pong (64-byte messages, TCP_NODELAY) from n1 to n2,
p50/p99 over 2000 round trips. Throughput: iperf3, one TCP stream n1 -> n2.
Targets (issue 4): added RTT <= 0.5 ms, TCP >= 200 Mbit/s with both.

Run as root: .venv/bin/python bench/bench_cluster_overhead.py [--seconds 5] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.cluster.netns import NetnsCluster  # noqa: E402
from mallory.polling import wait_until  # noqa: E402

PING_SERVER = """
import socket
s = socket.create_server(("0.0.0.0", 9100))
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(64)
        if not d:
            break
        c.sendall(d)
    c.close()
"""
PING_CLIENT = """
import json, socket, sys, time
rounds = int(sys.argv[2])
s = socket.create_connection((sys.argv[1], 9100))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"x" * 64
for _ in range(50):
    s.sendall(msg); s.recv(64)
rtts = []
for _ in range(rounds):
    t0 = time.perf_counter_ns()
    s.sendall(msg)
    got = 0
    while got < 64:
        got += len(s.recv(64))
    rtts.append(time.perf_counter_ns() - t0)
rtts.sort()
print(json.dumps({"p50": rtts[len(rtts) // 2] / 1e6, "p99": rtts[int(len(rtts) * 0.99)] / 1e6, "mean": sum(rtts) / len(rtts) / 1e6}))
"""


def measure(cluster: NetnsCluster, seconds: float, rounds: int) -> dict:
    n2 = cluster.node_address("n2")
    rtt = json.loads(cluster.exec("n1", [sys.executable, "-c", PING_CLIENT, n2, str(rounds)], timeout=120).stdout)
    out = cluster.exec("n1", ["iperf3", "-c", n2, "-t", str(seconds), "-J"], timeout=seconds + 30).stdout
    iperf = json.loads(out)
    rtt["mbit"] = iperf["end"]["sum_received"]["bits_per_second"] / 1e6
    rtt["retransmits"] = iperf["end"]["sum_sent"].get("retransmits", 0)
    return rtt


def start_mediator(cluster: NetnsCluster) -> list:
    ready = cluster.data_dir("gw") / "mediator.ready"
    proc = cluster.spawn(
        "gw",
        [sys.executable, "-m", "mallory.cli", "mediator", "--run", cluster.run, "--ready-file", str(ready)],
        name="mediator",
        env={"MALLORY_TOKEN": "bench"},
    )
    wait_until(ready.exists, 20, "the mediator")
    return [proc]


def start_observers(cluster: NetnsCluster, mode: str) -> list:
    procs = []
    for node in ("n1", "n2"):
        procs.append(
            cluster.spawn(
                node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run, "--mode", mode], name="observer"
            )
        )
    for node in ("n1", "n2"):
        wait_until(lambda: "MALLORY-OBS-IN" in cluster.exec(node, ["iptables-save"]).stdout, 20, f"the observer of {node}")
    time.sleep(0.3)
    return procs


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def observer_counts(procs: list) -> tuple[int, int]:
    """Packets the observers saw and copies/packets they know they missed, from the last
    line each observer logs on exit."""
    seen = lost = 0
    for proc in procs:
        if proc.name != "observer":
            continue
        last = [line for line in proc.log_path.read_text().splitlines() if " packets, " in line][-1]
        match = re.search(r": (\d+) packets, .* (\d+) lost in the queue", last)
        seen += int(match.group(1))
        lost += int(match.group(2))
    return seen, lost


def stop(cluster: NetnsCluster, procs: list) -> None:
    for proc in procs:
        cluster.signal(proc, signal.SIGTERM)
    for proc in procs:
        if cluster.wait(proc, 10) is None:
            cluster.signal(proc, signal.SIGKILL)
            cluster.wait(proc, 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="iperf3 duration per mode")
    parser.add_argument("--rounds", type=int, default=2000, help="TCP ping-pong round trips per mode")
    parser.add_argument("--modes", default="plain,observers,nflog,mediator,both,both-nflog")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_cluster_overhead: needs root (network namespaces)", file=sys.stderr)
        return 1
    scratch = tempfile.TemporaryDirectory(prefix="mallory-bench-")  # node logs and data, removed at exit
    cluster = NetnsCluster.up(f"bench-{uuid.uuid4().hex[:6]}", data_root=Path(scratch.name), nodes=2)
    results: dict[str, dict] = {}
    try:
        cluster.spawn("n2", [sys.executable, "-c", PING_SERVER], name="pingd")
        cluster.spawn("n2", ["iperf3", "-s"], name="iperf3")
        time.sleep(0.5)
        for mode in args.modes.split(","):
            procs = []
            if mode in ("mediator", "both", "both-nflog"):
                procs += start_mediator(cluster)
            if mode in ("observers", "both"):
                procs += start_observers(cluster, "nfqueue")
            if mode in ("nflog", "both-nflog"):
                procs += start_observers(cluster, "nflog")
            try:
                cpu0 = {p.pid: cpu_seconds(p.pid) for p in procs}
                results[mode] = measure(cluster, args.seconds, args.rounds)
                cpu: dict[str, float] = {}
                for p in procs:
                    cpu[p.name] = cpu.get(p.name, 0.0) + cpu_seconds(p.pid) - cpu0[p.pid]
            finally:
                stop(cluster, procs)
            r = results[mode]
            r["observed"], r["lost"] = observer_counts(procs)
            r["cpu"] = cpu
            print(f"{mode:10s} rtt p50 {r['p50']:.3f} ms p99 {r['p99']:.3f} ms  tcp {r['mbit']:9.1f} Mbit/s  retransmits {r['retransmits']}"
                  f"  observed {r['observed']} lost {r['lost']}", flush=True)
            for name, seconds in r["cpu"].items():
                per = f", {seconds / r['observed'] * 1e6:.1f} us per observed packet" if name == "observer" and r["observed"] else ""
                print(f"{'':10s} {name} cpu {seconds:.2f} s over the run{per}")
    finally:
        cluster.down()
        scratch.cleanup()
    base = results.get("plain")
    if base:
        print("\nagainst plain, same run:")
        for mode, r in results.items():
            print(
                f"{mode:10s} added rtt p50 {r['p50'] - base['p50']:+.3f} ms p99 {r['p99'] - base['p99']:+.3f} ms"
                f"  tcp x{r['mbit'] / base['mbit']:.3f}"
            )
        for full in ("both", "both-nflog"):
            if full in results:
                both = results[full]
                added = both["p50"] - base["p50"]
                print(f"targets ({full}): added rtt p50 {added:.3f} ms (<= 0.5: {'ok' if added <= 0.5 else 'MISSED'}), "
                      f"tcp {both['mbit']:.0f} Mbit/s (>= 200: {'ok' if both['mbit'] >= 200 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
