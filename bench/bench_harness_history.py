"""How much recording costs: ops/s of the history recorder writing history.edn and
history.jsonl (one unbuffered write per op per format) against the same recorder keeping
ops in memory only, measured in the same run; then a list-append workload's throughput
against a real redis-server on loopback, with and without the history on disk.

Numbers are noisy on a shared machine: read the ratios, not the absolute rates.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.cluster.loopback import LoopbackBackend  # noqa: E402
from mallory.harness.history import HistoryRecorder  # noqa: E402
from mallory.harness.runner import RunConfig, WorkloadRunner  # noqa: E402
from mallory.harness.spec import parse_spec  # noqa: E402
from mallory.harness.spec_adapter import SpecAdapter  # noqa: E402
from mallory.harness.workload import KeySpace, ListAppendWorkload  # noqa: E402
from mallory.history.edn import Keyword  # noqa: E402
from mallory.suts.registry import SPEC_CLIENTS  # noqa: E402

N = 50_000


def record(rec: HistoryRecorder) -> float:
    txn = [[Keyword("append"), 3, 7], [Keyword("r"), 3, None]]
    done = [[Keyword("append"), 3, 7], [Keyword("r"), 3, [1, 2, 3, 7]]]
    t0 = time.perf_counter()
    for i in range(N):
        rec.invoke(i % 5, "txn", txn)
        rec.complete(i % 5, "ok", done)
    rec.close()
    return 2 * N / (time.perf_counter() - t0)


def workload_rate(adapter: SpecAdapter, out: Path | None) -> float:
    workload = ListAppendWorkload(KeySpace(key_count=10))  # Elle-like: 32 writes per key
    rec = HistoryRecorder.to_dir(out, keep=False) if out else HistoryRecorder([], keep=False)
    summary = WorkloadRunner(
        workload, lambda w: adapter.client("n1", workload), rec, RunConfig(concurrency=5, time_limit=3.0)
    ).run()
    rec.close()
    return summary.invokes / summary.elapsed


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-harness-"))
    try:
        memory = record(HistoryRecorder([], keep=True))
        disk = record(HistoryRecorder.to_dir(tmp / "hist", keep=False))
        print(f"recorder, memory only:        {memory:10.0f} ops/s")
        print(f"recorder, edn + jsonl on disk: {disk:10.0f} ops/s  (ratio {disk / memory:.2f} of memory-only)")

        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        spec = parse_spec(
            f"""
name = "redis"
[start]
command = ["redis-server", "--bind", "{{address}}", "--port", "{{port}}", "--dir", "{{data_dir}}",
           "--save", "", "--appendonly", "no", "--logfile", ""]
[ports]
client = {port}
[client]
kind = "redis"
""",
            "bench",
        )
        backend = LoopbackBackend(1, root=tmp / "cluster")
        try:
            adapter = SpecAdapter(spec, backend, clients=SPEC_CLIENTS)
            adapter.start("n1")
            adapter.wait_ready("n1")
            bare = workload_rate(adapter, None)
            recorded = workload_rate(adapter, tmp / "run")
        finally:
            backend.down()
        print(f"list-append on redis, c=5, history in memory: {bare:8.0f} txns/s")
        print(f"list-append on redis, c=5, history on disk:   {recorded:8.0f} txns/s  (ratio {recorded / bare:.2f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
