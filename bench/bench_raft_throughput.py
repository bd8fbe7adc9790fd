"""raft-kv throughput: a plain build (cc) against the mallory-cc build writing its code
events into shm rings, on a 3-node loopback cluster, same run, same load.

Prints ops/s of closed-loop PUTs (C client threads, each its own connection to the leader)
for both builds and their ratio, with the trace off (LIBRAFT_TRACE unset) and on. Numbers
are noisy on a shared machine: compare the ratios, measured back to back in one run.

    .venv/bin/python bench/bench_raft_throughput.py [--seconds 5] [--clients 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.cluster.loopback import LoopbackBackend  # noqa: E402
from mallory.harness.session import start_all, teardown_all  # noqa: E402
from mallory.harness.spec import load_spec  # noqa: E402
from mallory.observer.ring import create_ring  # noqa: E402
from mallory.suts.raft_kv.adapter import DEFAULT_SPEC, SUT_DIR, RaftKvAdapter, build  # noqa: E402


def plain_build(dest: Path) -> Path:
    import subprocess

    subprocess.run(["make", "-C", str(SUT_DIR), "CC=cc", f"BUILD={dest}"], check=True, capture_output=True, timeout=300)
    return dest / "raft-kv"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(binary: Path, seconds: float, clients: int, trace: bool) -> float:
    backend = LoopbackBackend(3)
    for node in backend.nodes:  # as an observer would: the SUT writes its events there
        create_ring(backend.shm_name(node), 1 << 20, exist_ok=True)
    spec = load_spec(DEFAULT_SPEC)
    spec = dataclasses.replace(
        spec,
        command=(str(binary), *spec.command[1:]),
        ports={"client": free_port(), "peer": free_port()},
        env={"LIBRAFT_TRACE": "1"} if trace else {},
    )
    sut = RaftKvAdapter(spec, backend)
    try:
        start_all(sut)
        leader = sut.leader()
        address = (backend.client_address(leader), spec.ports["client"])
        done = [0] * clients
        stop = time.monotonic() + seconds

        def worker(i: int) -> None:
            with socket.create_connection(address, timeout=5) as s:
                f = s.makefile("rwb")
                n = 0
                while time.monotonic() < stop:
                    f.write(f"PUT k{i} {n}\n".encode())
                    f.flush()
                    if f.readline().strip() == b"OK":
                        n += 1
                done[i] = n

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (time.monotonic() - start)
    finally:
        teardown_all(sut)
        backend.destroy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        plain = plain_build(Path(tmp) / "plain")
        instrumented = build(Path(tmp) / "instrumented")
        print(f"raft-kv PUT throughput, 3 nodes on loopback, {args.clients} clients, {args.seconds:g} s each")
        for trace in (False, True):
            base = measure(plain, args.seconds, args.clients, trace)
            inst = measure(instrumented, args.seconds, args.clients, trace)
            label = "trace on " if trace else "trace off"
            print(f"{label}: plain {base:8.0f} ops/s  mallory-cc {inst:8.0f} ops/s  ratio {inst / base:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
