"""Benchmark: the Elle-style checker on a generated 100,000-transaction list-append history.

Generates a strict-serializable history (concurrent clients, an in-memory store applying
each transaction atomically between its invoke and completion, keys retired after a
number of appends as Jepsen's list-append workload does, some :fail and :info ops), writes
it as history.edn, reads it back, and checks it for strict-serializability. Then checks a
copy with one seeded lost write (which must be flagged). Prints times, ops/s, the check
time relative to the time to read the EDN in the same run, and peak RSS. Target: the
100k check <= 60 s.

    .venv/bin/python bench/bench_oracles_elle.py [--txns 100000] [--seed 1]
"""

from __future__ import annotations

import argparse
import io
import random
import resource
import sys
import time
from typing import Any

from mallory.history.edn import Keyword
from mallory.history.ops import Op, read_history_text, write_edn
from mallory.oracles.elle import ElleOptions, check_elle

APPEND, READ, TXN = Keyword("append"), Keyword("r"), Keyword("txn")


def generate(n_txns: int, seed: int, clients: int = 10, active_keys: int = 10, writes_per_key: int = 32,
             lose_write_at: int | None = None) -> list[Op]:
    rng = random.Random(seed)
    ops: list[Op] = []
    store: dict[int, list[int]] = {}
    appended: dict[int, int] = {}
    keys = list(range(active_keys))
    next_key = active_keys
    state: list[dict[str, Any] | None] = [None] * clients
    procs = list(range(clients))
    next_proc = clients
    started = 0
    lost = False
    while started < n_txns or any(state):
        c = rng.randrange(clients)
        s = state[c]
        if s is None:
            if started >= n_txns:
                continue
            started += 1
            txn = []
            for _ in range(rng.randint(1, 4)):
                k = rng.choice(keys)
                if rng.random() < 0.5:
                    appended[k] = appended.get(k, 0) + 1
                    txn.append([APPEND, k, appended[k]])
                    if appended[k] >= writes_per_key:  # retire the key, as Jepsen does
                        keys[keys.index(k)] = next_key
                        next_key += 1
                else:
                    txn.append([READ, k, None])
            outcome = rng.choices(("ok", "fail", "info"), (0.9, 0.05, 0.05))[0]
            state[c] = {"txn": txn, "outcome": outcome, "done": False}
            ops.append(Op(len(ops), procs[c], Keyword("invoke"), TXN, txn))
        elif not s["done"]:
            apply = s["outcome"] == "ok" or (s["outcome"] == "info" and rng.random() < 0.5)
            result = []
            for f, k, v in s["txn"]:
                if f == APPEND:
                    if apply:
                        if lose_write_at is not None and not lost and started >= lose_write_at and s["outcome"] == "ok":
                            lost = True
                        else:
                            store.setdefault(k, []).append(v)
                    result.append([f, k, v])
                else:
                    result.append([f, k, list(store.get(k, []))])
            s["result"], s["done"] = result, True
        else:
            value = s["result"] if s["outcome"] == "ok" else s["txn"]
            ops.append(Op(len(ops), procs[c], Keyword(s["outcome"]), TXN, value))
            if s["outcome"] == "info":
                procs[c] = next_proc
                next_proc += 1
            state[c] = None
    # a final read of every key by a fresh process, after everything completed
    final = [[READ, k, None] for k in sorted(store)]
    ops.append(Op(len(ops), next_proc, Keyword("invoke"), TXN, final))
    ops.append(Op(len(ops), next_proc, Keyword("ok"), TXN, [[READ, k, list(store[k])] for k in sorted(store)]))
    return ops


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--txns", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    opts = ElleOptions(consistency_models=("strict-serializable",))

    t0 = time.perf_counter()
    ops = generate(args.txns, args.seed)
    t_gen = time.perf_counter() - t0
    buf = io.StringIO()
    write_edn(ops, buf)
    text = buf.getvalue()
    n_events = len(ops)
    del ops, buf  # only the history read back stays in memory, as in `mallory check`
    t0 = time.perf_counter()
    _, back = read_history_text(text, "edn", "generated.edn")
    t_read = time.perf_counter() - t0
    assert len(back) == n_events
    text_mb = len(text) / 1e6
    del text
    t0 = time.perf_counter()
    result = check_elle(back, "list-append", opts, "generated.edn")
    t_check = time.perf_counter() - t0
    print(f"history: {args.txns} transactions, {n_events} events, {text_mb:.1f} MB of EDN "
          f"(generated in {t_gen:.1f} s)")
    print(f"read EDN:          {t_read:7.2f} s")
    print(f"check (valid):     {t_check:7.2f} s  verdict={result.valid}  "
          f"{args.txns / t_check:,.0f} txns/s  check/read ratio {t_check / t_read:.2f}")
    print(f"  stats: {result.stats}")
    ok = result.valid is True
    rss_valid = peak_rss_mb()
    del back, result

    bad_ops = generate(args.txns, args.seed, lose_write_at=args.txns // 2)
    t0 = time.perf_counter()
    bad = check_elle(bad_ops, "list-append", opts, "generated-lost-write")
    t_bad = time.perf_counter() - t0
    print(f"check (lost write): {t_bad:6.2f} s  verdict={bad.valid}  anomalies={bad.anomaly_types}")
    print(f"  stats: {bad.stats}")
    ok = ok and bad.valid is False
    print(f"peak RSS: {rss_valid:.0f} MB after reading and checking the valid history, "
          f"{peak_rss_mb():.0f} MB at the end")
    target = 60.0
    print(f"target: check of {args.txns} txns <= {target:.0f} s: {'met' if t_check <= target else 'MISSED'} "
          f"({t_check:.1f} s; CPU shared with other jobs, so times are noisy)")
    if not ok:
        print("FAIL: wrong verdict", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
