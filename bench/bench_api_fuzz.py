"""The mediator's HTTP API under a volume of malformed and well-formed requests: the fuzz
test's requests (tests/unit/mediator/api_fuzz.py: every route, JSON and EDN bodies, wrong
types, huge, deep and truncated bodies, bad or missing tokens, unknown routes and methods,
broken framing) sent one connection each to a real in-process Mediator on loopback (no
firewall, no root), each judged as it comes back. Prints the requests sent, 5xx answers,
crashes (no answer, a bug the server counted, a thread of the mediator gone), rejections by
status, requests/s, and the first problems found; exits 1 if there was any.

The closing note wants a million requests: `--requests 1000000` (about an hour on a busy
2-core machine at ~270 requests/s; the default 100k takes about 6 minutes).
Hypothesis draws the requests in runs of --chunk (each run a fresh random seed), so its
memory of what it drew stays bounded.

    .venv/bin/python bench/bench_api_fuzz.py [--requests 100000] [--chunk 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from tests.unit.mediator.api_fuzz import (  # noqa: E402
    STATUS_REQUEST,
    Request,
    StateProbe,
    exchange,
    fuzz_mediator,
    judge,
    requests,
    served_routes,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="requests to send (default 100000)")
    parser.add_argument("--chunk", type=int, default=10_000, help="requests per Hypothesis run (default 10000)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for an answer")
    args = parser.parse_args()

    statuses: Counter[int | None] = Counter()
    problems: list[tuple[str, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-api-fuzz-") as tmp:
        m = fuzz_mediator(Path(tmp))
        m.api.request_timeout = 2.0  # requests cut short by their client are answered sooner
        probe = StateProbe(m)
        address = m.api.server_address[:2]
        routes = served_routes()

        def send(request: Request) -> None:
            before = probe.snapshot()
            answer, follow_up = exchange(address, request, timeout=args.timeout)
            statuses[answer.status] += 1
            found = judge(answer, follow_up, before, probe.snapshot())
            if found:
                problems.append((request.describe(), found))

        t0 = time.monotonic()
        sent = 0
        try:
            while sent < args.requests:
                chunk = min(args.chunk, args.requests - sent)
                run = settings(max_examples=chunk, deadline=None, database=None, phases=[Phase.generate],
                               suppress_health_check=list(HealthCheck))(given(request=requests(routes))(send))
                run()
                sent += chunk
                elapsed = time.monotonic() - t0
                print(f"  {sent} requests, {sum(statuses.values()) / elapsed:.0f}/s, {len(problems)} problems",
                      file=sys.stderr, flush=True)
        finally:
            elapsed = time.monotonic() - t0
            alive = all(t.is_alive() for t in (m.api._thread, m._ticker))
            last, _ = exchange(address, Request(STATUS_REQUEST), timeout=args.timeout)
            m.stop()

    total = sum(statuses.values())
    no_answer = statuses.get(None, 0)
    fives = sum(n for status, n in statuses.items() if status is not None and status >= 500)
    crashes = no_answer + m.api.bugs + (not alive) + (last.status != 200)
    print(f"requests          : {total}")
    print(f"requests/s        : {total / elapsed:.0f}")
    print(f"5xx               : {fives}")
    print(f"crashes           : {crashes} (no answer {no_answer}, server bugs {m.api.bugs}, "
          f"threads alive {alive}, /status after {last.status})")
    print(f"accepted (200)    : {statuses.get(200, 0)}")
    print("rejected by status: " + ", ".join(f"{status}: {n}" for status, n in sorted(
        (s, n) for s, n in statuses.items() if s is not None and 400 <= s < 500)))
    print(f"problems          : {len(problems)}")
    for request, found in problems[:10]:
        print(f"  {request}\n    {'; '.join(found)}")
    return 1 if problems or crashes or fives else 0


if __name__ == "__main__":
    sys.exit(main())
