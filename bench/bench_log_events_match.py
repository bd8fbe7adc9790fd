"""Cost of turning log lines into LOG events, on real etcd 3.4 lines
(tests/unit/observer/fixtures) with the etcd adapter's patterns: the observer's matcher
(`LineMatcher`: each pattern searched over the whole chunk in C, only lines some pattern
matches reach Python) against the obvious loop (every pattern searched in every line, in
Python) and against one alternation of all the patterns; with all 36 patterns (the last
names every other raft line by its normalised message) and with the 35 named ones only;
then the whole tail (file write, read, match, events) through `LogWatcher`.

    .venv/bin/python bench/bench_log_events_match.py [--repeat N]

All matchers run in the same process on the same text, best of 5, so the ratios hold on
a loaded machine even when the absolute numbers do not.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.observer.log_events import (  # noqa: E402
    LineMatcher,
    LogWatcher,
    WatchedPattern,
    event_name,
)
from mallory.suts.etcd.adapter import LOG_EVENTS  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "unit" / "observer" / "fixtures"


def naive(entries: list[tuple[re.Pattern[str], str]], text: str) -> list[str]:
    found = []
    for line in text.split("\n"):
        for regex, name in entries:
            if regex.search(line):
                found.append(name or event_name(line))
                break
    return found


def alternation_lines(regex: re.Pattern[str], text: str) -> int:
    """Lines one alternation of every pattern matches (not even naming them: a lower bound
    on that design's cost)."""
    pos = found = 0
    while (m := regex.search(text, pos)) is not None:
        found += 1
        pos = text.find("\n", m.start()) + 1
        if not pos:
            break
    return found


def best_of(fn, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=100, help="copies of the fixture lines (default 100)")
    args = parser.parse_args()
    lines = [line for f in sorted(FIXTURES.glob("*.log")) for line in f.read_text().splitlines()]
    text = "\n".join(lines * args.repeat)
    count = len(lines) * args.repeat
    every = [(p.pattern, p.name) for p in LOG_EVENTS]
    for label, entries in (("all patterns", every), ("named patterns only", [e for e in every if e[1]])):
        matcher = LineMatcher(entries)
        compiled = [(re.compile(p), n) for p, n in entries]
        alternation = re.compile("|".join(f"(?:{p})" for p, _ in entries), re.MULTILINE)
        expected = naive(compiled, text)
        assert matcher.names(text) == expected, "the matchers disagree"
        t_naive = best_of(lambda: naive(compiled, text))
        t_alt = best_of(lambda: alternation_lines(alternation, text))
        t_scan = best_of(lambda: matcher.names(text))
        print(f"{label}: {count} lines, {len(expected)} give events, {len(entries)} patterns")
        print(f"  naive loop (pattern x line in Python):  {count / t_naive:12,.0f} lines/s")
        print(f"  one alternation, lines found only:      {count / t_alt:12,.0f} lines/s")
        print(f"  LineMatcher (per-pattern chunk scan):   {count / t_scan:12,.0f} lines/s "
              f"({t_naive / t_scan:.1f}x the naive loop)")
    entries = every
    matched = len(LineMatcher(entries).names(text))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "etcd.log"
        path.write_bytes(b"")
        watcher = LogWatcher("n1", [WatchedPattern(p, n, str(path)) for p, n in entries])
        data = (text + "\n").encode()
        t0 = time.perf_counter()
        with open(path, "ab") as f:
            f.write(data)
        events = []
        while True:
            got = watcher.poll_events()
            if not got and watcher.lines >= count:
                break
            events += got
        elapsed = time.perf_counter() - t0
        assert len(events) == matched
        print(f"tail end to end (write, read, match, events): {count / elapsed:12,.0f} lines/s, "
              f"{len(data) / elapsed / 1e6:.1f} MB/s")


if __name__ == "__main__":
    main()
