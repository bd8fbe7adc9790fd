"""Benchmark: check every Porcupine etcd history (and the kv histories) of the conformance set.

Every verdict is compared with the one the source asserts; none may be unknown. Prints the
total and per-file times, the slowest file, and the check time relative to the time it
takes just to read the same files in this run (so the ratio is comparable across machines
and CPU contention).

    .venv/bin/python bench/bench_oracles_linearizability.py [--conformance DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mallory.history.ops import read_history
from mallory.oracles.check import CheckOptions, check_history

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "conformance"
FORMATS = {"porcupine-etcd-log": ("porcupine-etcd", "cas-register"), "porcupine-kv-lines": ("porcupine-kv", "kv")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conformance", type=Path, default=DEFAULT)
    args = ap.parse_args()
    manifest = json.loads((args.conformance / "manifest.json").read_text())
    entries = [e for e in manifest if e["format"] in FORMATS and e["scope"] == "in-scope"]
    failures = 0
    for label, wanted in (("etcd", "porcupine-etcd-log"), ("kv", "porcupine-kv-lines")):
        group = [e for e in entries if e["format"] == wanted]
        fmt, checker = FORMATS[wanted]
        t0 = time.perf_counter()
        histories = [(e, read_history(args.conformance / e["file"], fmt)[1]) for e in group]
        t_read = time.perf_counter() - t0
        times = []
        wrong = unknown = 0
        for e, ops in histories:
            t0 = time.perf_counter()
            r = check_history(ops, fmt, CheckOptions(checker=checker), e["file"])
            dt = time.perf_counter() - t0
            times.append((dt, e["file"], r.stats.get("ops", 0)))
            if r.valid == "unknown":
                unknown += 1
                print(f"  UNKNOWN {e['file']}: {r.explanation}")
            elif e["expected_valid"] is not None and r.valid is not e["expected_valid"]:
                wrong += 1
                print(f"  WRONG {e['file']}: got {r.valid}, expected {e['expected_valid']}")
        total = sum(t for t, _, _ in times)
        slowest = max(times)
        stated = sum(1 for e, _ in histories if e["expected_valid"] is not None)
        print(f"{label}: {len(histories)} histories ({stated} with a stated verdict): "
              f"{stated - wrong - unknown} correct, {wrong} wrong, {unknown} unknown")
        print(f"  check total {total:.2f} s, mean {1000 * total / len(times):.1f} ms/file, "
              f"read total {t_read:.2f} s, check/read ratio {total / t_read:.1f}")
        print(f"  slowest: {slowest[1]} ({slowest[2]} ops) {slowest[0]:.2f} s")
        failures += wrong + unknown
    print("(times are wall-clock on a shared machine: compare ratios, not absolute numbers)")
    if failures:
        print(f"FAIL: {failures} wrong or unknown verdicts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
