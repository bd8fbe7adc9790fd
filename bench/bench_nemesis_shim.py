"""What the clock/disk fault shim costs the SUT: ns per call of clock_gettime(REALTIME),
gettimeofday, clock_gettime(MONOTONIC) and a 1-byte write to a regular file, for a small C
program run plain, under the shim with every fault off, with a clock offset on, and with
unsynced-write tracking on (what a campaign with disk:lose-unsynced pays on data files).
Ratios are against the plain run measured in the same invocation (the machine is shared,
absolute numbers are noisy). Runs without root.

    .venv/bin/python bench/bench_nemesis_shim.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.cluster.registry import RunRecord  # noqa: E402
from nemesis.faults.controls import NodeControls  # noqa: E402

PROGRAM = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec ts; struct timeval tv; volatile long sink = 0;
    double t0 = now();
    for (long i = 0; i < n; i++) { clock_gettime(CLOCK_REALTIME, &ts); sink += ts.tv_nsec; }
    double t1 = now();
    for (long i = 0; i < n; i++) { gettimeofday(&tv, NULL); sink += tv.tv_usec; }
    double t2 = now();
    for (long i = 0; i < n; i++) { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
    double t3 = now();
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    long w = n / 10;
    for (long i = 0; i < w; i++) { if (write(fd, "x", 1) != 1) return 1; }
    double t4 = now();
    close(fd);
    printf("%.2f %.2f %.2f %.2f\n", (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n, (t4 - t3) / w);
    return (int)(sink & 0);
}
"""

REPEATS = 7
CALLS = ["clock_gettime(REALTIME)", "gettimeofday", "clock_gettime(MONOTONIC)", "write(1 byte, file)"]


def run(binary: Path, out: Path, env: dict[str, str], n: int) -> list[float]:
    line = subprocess.run([str(binary), str(n), str(out)], env={**os.environ, **env}, capture_output=True,
                          text=True, check=True).stdout
    return [float(x) for x in line.split()]


def best(runs: list[list[float]]) -> list[float]:
    """Per call, the best run (the least disturbed by other load)."""
    return [min(r[i] for r in runs) for i in range(len(CALLS))]


def main() -> None:
    n = 2_000_000
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "bench.c"
        src.write_text(PROGRAM)
        binary = tmp_path / "bench"
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(src)], check=True)
        record = RunRecord("bench", 0, tmp_path / "state", tmp_path / "data")
        record.state_dir.mkdir()
        controls = NodeControls(record, ["n1"]).prepare()
        env = controls.env("n1")
        out = tmp_path / "out.bin"
        runs: dict[str, list[list[float]]] = {"plain": [], "off": [], "on": [], "track": []}
        for _ in range(REPEATS):  # interleaved, so drifting load hits all alike
            runs["plain"].append(run(binary, out, {}, n))
            controls.set_clock("n1", 0.0)
            runs["off"].append(run(binary, out, env, n))
            controls.set_clock("n1", 42.0)
            runs["on"].append(run(binary, out, env, n))
            controls.set_clock("n1", 0.0)
            controls.set_tracking("n1", os.path.realpath(tmp_path) + "/")
            runs["track"].append(run(binary, out, env, n))
            controls.set_tracking("n1", None)
        plain, off, offset, track = (best(runs[k]) for k in ("plain", "off", "on", "track"))
    print(f"shim cost per call, ns (best of {REPEATS} interleaved runs of {n} calls; write: {n // 10})")
    print(f"{'call':28} {'plain':>8} {'shim off':>9} {'ratio':>6} {'clock on':>9} {'ratio':>6} {'tracking':>9} {'ratio':>6}")
    for i, call in enumerate(CALLS):
        print(f"{call:28} {plain[i]:8.1f} {off[i]:9.1f} {off[i] / plain[i]:6.2f} {offset[i]:9.1f} {offset[i] / plain[i]:6.2f}"
              f" {track[i]:9.1f} {track[i] / plain[i]:6.2f}")


if __name__ == "__main__":
    main()
