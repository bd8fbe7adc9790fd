"""The Jepsen bridge's client-op relay (jepsen-bridge/src/mallory/jepsen/mediator.clj) against
a live in-process mediator: what one `relay-op!` costs the Jepsen worker that calls it, and
how many ops/s reach the mediator's timeline batched, against the baseline of one
`POST /client` per op measured in the same run (same JVM, same mediator). Needs Debian's
`clojure` (scripts/setup.sh installs it). The machine is shared: compare the ratio, not
the absolute numbers.

    .venv/bin/python bench/bench_jepsen_relay.py [--ops 8000] [--single 1000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.history.edn import loads  # noqa: E402
from mallory.mediator.service import MEDIATOR_NODE, Mediator  # noqa: E402
from mallory.polling import wait_until  # noqa: E402
from mallory.timeline.builder import Committed  # noqa: E402

TOKEN = "bench-relay"


def count_own_committed(m: Mediator) -> Callable[[], int]:
    """A counter of the mediator's own committed events (its ingest keeps none: a subscriber
    counts them); subscribe before the mediator starts."""
    counted = [0]

    def on_commit(entries: list[Committed]) -> None:
        counted[0] += sum(1 for e in entries if e.event.node == MEDIATOR_NODE)

    m.ingest.subscribers.append(on_commit)
    return lambda: counted[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=8000,
                        help="ops relayed in batches (beyond the relay's queue of 10000, ops are dropped)")
    parser.add_argument("--single", type=int, default=1000, help="ops posted one request each (baseline)")
    args = parser.parse_args()
    clojure = shutil.which("clojure")
    if clojure is None:
        print("clojure is not installed: run scripts/setup.sh", file=sys.stderr)
        return 1
    m = Mediator({"n1": "10.9.1.2"}, token=TOKEN, api_address=("127.0.0.1", 0),
                 batch_address=("127.0.0.1", 0), batch_interval=0.05)
    own_committed = count_own_committed(m)
    m.start()
    try:
        host, port = m.api.server_address[:2]
        env = {**os.environ, "MALLORY_URL": f"http://{host}:{port}", "MALLORY_TOKEN": TOKEN}
        done = subprocess.run([clojure, "-cp", "src", "bench/relay_bench.clj", str(args.ops), str(args.single)],
                              cwd=REPO / "jepsen-bridge", env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        r = {str(k): v for k, v in loads(done.stdout.strip().splitlines()[-1]).items()}
        total = 2000 + 200 + args.ops + args.single  # with the warm-up
        wait_until(lambda: own_committed() >= total, 30, "every relayed op committed")
        print(f"relay-op! call (worker's cost)   : {r['relay-op-call-us']:.2f} us per op")
        print(f"batched relay                     : {r['batched-ops-per-s']:.0f} ops/s ({r['batched-n']} ops)")
        print(f"one POST /client per op (baseline): {r['single-ops-per-s']:.0f} ops/s ({r['single-n']} ops)")
        print(f"ratio batched / baseline          : {r['batched-ops-per-s'] / r['single-ops-per-s']:.1f}x")
        print(f"dropped {r['dropped']}, failed {r['failed']}")
        print(f"mediator events committed         : {own_committed(m)} (expected {total})")
    finally:
        m.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
