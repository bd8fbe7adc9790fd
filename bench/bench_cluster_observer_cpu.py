"""CPU per packet of the observer's hot path, in process (no root, no namespaces).

Each stage is timed with process time (CPU actually used, so other load on the machine
inflates it less than wall time) over the same synthetic netlink datagrams, laid out as
nfnetlink_queue writes them (tests/unit/observer/netlink_messages.py): 1448-byte TCP segments
truncated to the observer's copy range.

  netlink      parse_datagram: packet id, hook, payload copy out of the datagram
  + id         + the packet id and payload abstraction (mallory/observer/packet.py)
  + event      + the Event the batch carries (Observer.on_packets)
  + encode     + the wire-codec encoding the BatchSender does per batch

Run: .venv/bin/python bench/bench_cluster_observer_cpu.py [--packets 100000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.observer.nfq import NF_INET_LOCAL_OUT, parse_datagram  # noqa: E402
from mallory.observer.observer import Observer  # noqa: E402
from mallory.observer.packet import id_and_data  # noqa: E402
from mallory.timeline.codec import encode  # noqa: E402
from mallory.timeline.event import Batch  # noqa: E402
from tests.unit.observer.netlink_messages import queued_packet, tcp_packet  # noqa: E402


class _Discard:
    def submit(self, events, until_ns, lost=0) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=100_000)
    args = parser.parse_args()
    n = args.packets
    datagrams = [bytearray(queued_packet(i + 1, NF_INET_LOCAL_OUT, tcp_packet(b"x" * 1448, seq=i * 1448))) for i in range(n)]
    views = [memoryview(d) for d in datagrams]

    def netlink() -> list:
        out: list = []
        for d, v in zip(datagrams, views):
            parse_datagram(d, v, len(d), 1, out)
        return out

    parsed = netlink()
    observer = Observer("n1", None, _Discard())

    def stage_id() -> None:
        for _, _, _, payload in netlink():
            id_and_data(payload)

    def stage_event() -> None:
        observer._events = []
        observer.on_packets(netlink())

    def stage_encode() -> None:
        stage_event()
        encode(Batch("n1", 0, 0, observer._events))

    print(f"{n} packets, CPU (process) time per packet:")
    base = None
    for name, fn in [("netlink", netlink), ("+ id", stage_id), ("+ event", stage_event), ("+ encode", stage_encode)]:
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        per = best / n * 1e6
        base = base or per
        print(f"  {name:10s} {per:6.2f} us  ({1e6 / per:9.0f} packets/s per core, x{per / base:.2f} of netlink)")
    assert len(parsed) == n
    return 0


if __name__ == "__main__":
    sys.exit(main())
