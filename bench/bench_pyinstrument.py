"""Cost of one Python-level code event (mallory/pyinstrument) against a plain call, and
what the events cost the pysyncobj SUT.

In one process: a ring is created and named in MALLORY_SHM, then the same small function is
called as plain Python, with an `# INSTRUMENT_FUNC` hook compiled in (AST rewrite), and
traced by name (wrapper from the import hook); each hit writes an event through
libmallory_rt.so. Also the emitter alone, and 4 threads hitting the annotated function at
once (the runtime's atomics; the GIL serialises Python). Prints ns per call, best of 5
runs, and the extra ns per event over the plain call measured in the same run (the machine
is shared: compare numbers of one run with each other).

Then the SUT: three suts/pysyncobj nodes on loopback, one client writing through the leader
as fast as it can for a few seconds, once plain (no MALLORY_SHM) and once instrumented
(a ring per node): ops/s, the nodes' CPU time per op, and events per op.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.observer.ring import RingReader, create_ring, unlink_ring  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CALLS = 200_000
SUT_SECONDS = 4.0
THREADS = 4
SOURCE = """
def plain(x):
    return x + 1

# INSTRUMENT_FUNC annotated
def annotated(x):
    return x + 1

def traced(x):
    return x + 1
"""


def best_ns_per_call(fn, calls: int = CALLS, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter_ns()
        for i in range(calls):
            fn(i)
        best = min(best, (time.perf_counter_ns() - started) / calls)
    return best


def threaded_ns_per_call(fn) -> float:
    per_thread = CALLS // THREADS

    def loop() -> None:
        for i in range(per_thread):
            fn(i)

    threads = [threading.Thread(target=loop) for _ in range(THREADS)]
    started = time.perf_counter_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter_ns() - started) / (per_thread * THREADS)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sut_run(instrumented: bool) -> tuple[float, float, float]:
    """(ops/s, node CPU ms per op, events per op) of one write-as-fast-as-possible client."""
    from mallory.observer.ring import RingReader
    from mallory.polling import wait_until

    ports = _free_ports(6)
    rings = [f"mallory-bench-kv-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)] if instrumented else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in rings:
                create_ring(name, 1 << 20)
            for i in range(3):
                peers = ",".join(f"127.0.0.1:{p}" for j, p in enumerate(ports[3:]) if j != i)
                node_env = {**env, "MALLORY_SHM": rings[i]} if instrumented else env
                procs.append(subprocess.Popen(
                    [str(REPO / "suts" / "pysyncobj" / "kv-node"), "--listen", "127.0.0.1", "--client-port", str(ports[i]),
                     "--peer-port", str(ports[3 + i]), "--peers", peers, "--data", f"{tmp}/n{i}"],
                    env=node_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

            def leader_port() -> int | None:
                for port in ports[:3]:
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                            s.sendall(b"STATUS\n")
                            if b"role=leader" in s.recv(200):
                                return port
                    except OSError:
                        pass
                return None

            port = wait_until(leader_port, 30, "a leader")
            readers = [RingReader(name, start="now") for name in rings]
            cpu_before = sum(_cpu_s(p.pid) for p in procs)
            ops = 0
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                stream = s.makefile("rwb")
                deadline = time.monotonic() + SUT_SECONDS
                started = time.monotonic()
                while time.monotonic() < deadline:
                    stream.write(f"PUT k {ops}\n".encode())
                    stream.flush()
                    assert stream.readline().startswith(b"OK")
                    ops += 1
                elapsed = time.monotonic() - started
            cpu = sum(_cpu_s(p.pid) for p in procs) - cpu_before
            events = sum(r.write_counter - r.cursor for r in readers)
            for r in readers:
                r.close()
            return ops / elapsed, cpu * 1000 / ops, events / ops
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
                p.wait()
            for name in rings:
                unlink_ring(name)


def main() -> int:
    name = f"mallory-bench-pyi-{uuid.uuid4().hex[:8]}"
    create_ring(name, 1 << 20)
    os.environ["MALLORY_SHM"] = name
    from mallory.pyinstrument.hooks import Instrumenter
    from mallory.pyinstrument.runtime import writer_from_env
    from mallory.pyinstrument.tracing import TraceTarget
    from mallory.timeline.event import Kind

    try:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "benchmod.py").write_text(SOURCE)
            sys.path.insert(0, tmp)
            writer = writer_from_env()
            assert writer is not None
            instrumenter = Instrumenter([tmp], [TraceTarget.parse("benchmod.traced")], writer.emitter)
            instrumenter.install()
            import benchmod  # type: ignore[import-not-found]

            emit = writer.emitter(1, Kind.FUNC)
            with RingReader(name) as reader:
                plain = best_ns_per_call(benchmod.plain)
                annotated = best_ns_per_call(benchmod.annotated)
                traced = best_ns_per_call(benchmod.traced)
                emit_only = best_ns_per_call(lambda _: emit())
                noop = best_ns_per_call(lambda _: None)
                threaded = threaded_ns_per_call(benchmod.annotated)
                written = reader.write_counter
        expected = CALLS * 5 * 3 + CALLS // THREADS * THREADS
        print(f"calls per run: {CALLS}, best of 5; events written: {written} (expected {expected})")
        print(f"plain call                 : {plain:7.1f} ns")
        print(f"annotated (INSTRUMENT_FUNC): {annotated:7.1f} ns   +{annotated - plain:6.1f} ns/event  x{annotated / plain:.2f}")
        print(f"traced by name (wrapper)   : {traced:7.1f} ns   +{traced - plain:6.1f} ns/event  x{traced / plain:.2f}")
        print(f"emitter alone              : {emit_only:7.1f} ns   (a no-op lambda: {noop:.1f} ns)")
        print(f"annotated, {THREADS} threads        : {threaded:7.1f} ns per call overall")
        if written != expected:
            return 1
    finally:
        unlink_ring(name)
    del os.environ["MALLORY_SHM"]
    plain_run = sut_run(instrumented=False)
    inst_run = sut_run(instrumented=True)
    print(f"pysyncobj SUT, 3 loopback nodes, one client writing for {SUT_SECONDS:g} s:")
    for label, (rate, cpu_ms, events) in (("plain", plain_run), ("instrumented", inst_run)):
        print(f"  {label:<12}: {rate:6.0f} ops/s  {cpu_ms:5.2f} ms node CPU/op  {events:5.1f} events/op")
    print(f"  instrumented/plain: ops/s x{inst_run[0] / plain_run[0]:.2f}, CPU/op x{inst_run[1] / plain_run[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
