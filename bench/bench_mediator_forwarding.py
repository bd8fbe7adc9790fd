"""Mediator forwarding rate: packets/s through the gateway's FORWARD queue with verdicts and
ids (target >= 30,000 pps), and the in-process rates of parsing + packet id and of the
whole per-packet decision; how much a delay rule adds to a round trip against the time
asked, and how soon a rule change is in effect.

Run as root: `.venv/bin/python bench/bench_mediator_forwarding.py [--seconds 3]`.
It brings up a 2-node netns run, floods UDP from n1 to n2 for a bounded time without
and then with the mediator on the gateway, and removes the run. Numbers on a shared
2-core machine are noisy; the ratios within one run are the thing to compare.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.mediator.firewall import Firewall  # noqa: E402
from mallory.observer.packet import IPV4_HEADER, parse  # noqa: E402
from tests.unit.mediator.packets import tcp  # noqa: E402


def rate(fn, arg, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(arg)
    return n / (time.perf_counter() - t0)


class _NoVerdicts:
    """Stands in for ForwardQueue in the in-process measurement: verdicts go nowhere."""

    def accept(self, packet_id: int) -> None:
        pass

    def drop(self, packet_id: int) -> None:
        pass

    def accept_upto(self, packet_id: int) -> None:
        pass


def in_process(n: int) -> None:
    pkt = tcp("10.9.1.2", "10.9.2.2", 40000, 5000, 12345, b"x" * 100)
    base = rate(IPV4_HEADER.unpack_from, pkt, n)
    parsed = rate(parse, pkt, n)
    print(f"in-process: header unpack only      {base:>12,.0f} /s  (baseline)")
    print(f"in-process: parse + id + payload    {parsed:>12,.0f} /s  ({parsed / base:.2f} of baseline)")
    fw = Firewall({"n1": "10.9.1.2", "n2": "10.9.2.2"})
    fw.queue = _NoVerdicts()
    drain = [(i, pkt) for i in range(1, 257)]
    rounds = max(1, n // len(drain))
    plain = rate(fw.process, drain, rounds) * len(drain)
    fw.drop([("n1", "n2")])
    dropped = rate(fw.process, drain, rounds) * len(drain)
    print(f"in-process: firewall decision       {plain:>12,.0f} /s  accept, {dropped:,.0f} /s drop rule")


def rx_packets(cluster, node: str) -> int:
    out = cluster.exec(node, ["cat", "/sys/class/net/eth0/statistics/rx_packets"]).stdout
    return int(out)


def flood(cluster, seconds: float) -> tuple[float, float]:
    """UDP from n1 to n2 for `seconds`: (sent/s, received at n2's interface /s)."""
    from tests.live.netns_helpers import udp_socket

    rx = udp_socket(cluster, "n2")
    tx = udp_socket(cluster, "n1")
    target = rx.getsockname()
    payload = b"m" * 32
    before = rx_packets(cluster, "n2")
    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    try:
        while time.perf_counter() < deadline:
            for _ in range(200):
                try:
                    tx.sendto(payload, target)
                    sent += 1
                except OSError:
                    pass  # ENOBUFS: the path is saturated
        elapsed = time.perf_counter() - t0
        time.sleep(0.3)
        received = rx_packets(cluster, "n2") - before
    finally:
        rx.close()
        tx.close()
    return sent / elapsed, received / elapsed


def delay_accuracy(cluster, mediator) -> None:
    """What a 40 ms delay on n1->n2, then 20 ms more on n2->n1, add to the median round
    trip (the live test checks only that they add at least that)."""
    from tests.live.netns_helpers import udp_rtts

    base = statistics.median(udp_rtts(cluster, "n1", "n2", n=30))
    mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": 40})
    one = statistics.median(udp_rtts(cluster, "n1", "n2", n=30)) - base
    mediator.ok("POST", "/firewall/delay", {"links": ["n2->n1"], "ms": 20})
    both = statistics.median(udp_rtts(cluster, "n1", "n2", n=30)) - base
    mediator.ok("POST", "/firewall/heal", {})
    print(f"delay added to a round trip:        {one:.1f} ms for 40 ms one way, {both:.1f} ms for 40 + 20 ms "
          f"(target: at most 20 and 25 ms over; base {base:.2f} ms)")


def through_queue(seconds: float) -> None:
    from mallory.cluster.netns import NetnsCluster
    from tests.live.netns_helpers import MediatorProcess

    cluster = NetnsCluster.up(f"bm-{uuid.uuid4().hex[:6]}", 2)
    try:
        sent0, recv0 = flood(cluster, seconds)
        print(f"forwarding, no mediator:            sent {sent0:>10,.0f} pps, delivered {recv0:>10,.0f} pps  (baseline)")
        mediator = MediatorProcess(cluster).start()
        try:
            seen_before = mediator.ok("GET", "/metrics")["firewall"]["seen"]
            sent1, recv1 = flood(cluster, seconds)
            fw = mediator.ok("GET", "/metrics")["firewall"]
            seen = (fw["seen"] - seen_before) / seconds
            print(f"forwarding, mediator (accept+id):   sent {sent1:>10,.0f} pps, delivered {recv1:>10,.0f} pps, "
                  f"verdicts {seen:>10,.0f} pps  (target >= 30,000; {seen / recv0:.2f} of the baseline rate; "
                  f"~{max(0.0, recv1 - seen):,.0f} pps passed a full queue unqueued: fail-open)")
            mediator.ok("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": 1})
            seen_before = fw["seen"]
            sent2, recv2 = flood(cluster, seconds)
            fw = mediator.ok("GET", "/metrics")["firewall"]
            print(f"forwarding, mediator (1 ms delay):  sent {sent2:>10,.0f} pps, delivered {recv2:>10,.0f} pps, "
                  f"verdicts {(fw['seen'] - seen_before) / seconds:>10,.0f} pps")
            mediator.ok("POST", "/firewall/heal", {})
            delay_accuracy(cluster, mediator)
            applied = []
            done = threading.Event()

            def changes() -> None:
                time.sleep(0.3)
                for _ in range(10):
                    applied.append(mediator.ok("POST", "/firewall/drop", {"links": ["n2->n1"]})["applied_us"])
                    applied.append(mediator.ok("POST", "/firewall/heal", {"links": ["n2->n1"]})["applied_us"])
                done.set()

            t = threading.Thread(target=changes)
            t.start()
            flood(cluster, seconds)
            t.join()
            applied.sort()
            print(f"rule changes during the flood:      applied in median {applied[len(applied) // 2]:.0f} us, "
                  f"max {applied[-1]:.0f} us over {len(applied)} changes (target: within 1 ms)")
        finally:
            mediator.kill(signal.SIGTERM)
    finally:
        cluster.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--n", type=int, default=300_000, help="iterations of the in-process loops")
    args = parser.parse_args()
    in_process(args.n)
    if os.geteuid() != 0:
        print("forwarding: skipped (needs root for namespaces and NFQUEUE)")
        return 0
    through_queue(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
