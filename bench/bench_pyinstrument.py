"""Cost of one Python-level code event (mallory/pyinstrument) against a plain call.

In one process: a ring is created and named in MALLORY_SHM, then the same small function is
called as plain Python, with an `# INSTRUMENT_FUNC` hook compiled in (AST rewrite), and
traced by name (wrapper from the import hook); each hit writes an event through
libmallory_rt.so. Also the emitter alone, and 4 threads hitting the annotated function at
once (the runtime's atomics; the GIL serialises Python). Prints ns per call, best of 5
runs, and the extra ns per event over the plain call measured in the same run (the machine
is shared: compare numbers of one run with each other).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.observer.ring import RingReader, create_ring, unlink_ring  # noqa: E402

CALLS = 200_000
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
        return 0 if written == expected else 1
    finally:
        unlink_ring(name)


if __name__ == "__main__":
    sys.exit(main())
