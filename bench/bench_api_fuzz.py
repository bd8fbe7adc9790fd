"""The mediator's HTTP API under a volume of malformed and well-formed requests: the fuzz
test's requests (tests/unit/mediator/api_fuzz.py: every route, JSON and EDN bodies, wrong
types, huge, deep and truncated bodies, bad or missing tokens, unknown routes and methods,
broken framing) sent one connection each to a real in-process Mediator on loopback (no
firewall, no root), each judged as it comes back. Prints the requests sent, 5xx answers,
crashes (no answer, a bug the server counted, a thread of the mediator gone), rejections by
status, requests/s, and the first problems found; exits 1 if there was any.

Hypothesis draws the requests in --drawers processes of their own (drawing costs about
twice what sending and judging does, and there it shares no GIL with the mediator), each in
runs of --chunk examples (each run a fresh random seed, so its memory of what it drew stays
bounded), handing them over in batches through a bounded queue.

Timing, measured only at a tiny scale (2000 requests, --chunk 1000) on a 2-core machine
another benchmark kept busy (load ~1.5; back-to-back runs differ by up to 20%): 610-730
requests/s, where drawing and sending in one process made 300-360/s. So the closing note's
`--requests 1000000` takes 23-27 minutes there, the default 100k under 3. A request costs
about 1.4 ms of CPU to draw and 0.7 ms to send, serve and judge, which puts an idle
2-core machine's ceiling near 950/s (not measured).

    .venv/bin/python bench/bench_api_fuzz.py [--requests 100000] [--chunk 10000] [--drawers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
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

BATCH = 50  # requests per hand-over: fewer pickles, pipe writes and wake-ups for the sender
BACKLOG = 4  # batches a drawer may be ahead: bounds memory (a batch holds ~4 huge bodies of 1 MiB)
#: the drawers' niceness: the sender and the mediator's threads wake several times a request,
#: and a drawer at their priority delays each wake-up (measured: ~15% of the requests/s)
DRAWER_NICE = 10


def draw_forever(routes: list[tuple[str, str]], chunk: int, out: Queue[list[Request]]) -> None:
    """A drawer process: Hypothesis runs of `chunk` requests to `routes`, put on `out` in
    lists of BATCH, until the process is ended or its parent is gone."""
    os.nice(DRAWER_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the sender's to handle: it ends the drawers
    parent = mp.parent_process()
    batch: list[Request] = []

    def keep(request: Request) -> None:
        batch.append(request)
        if len(batch) < BATCH:
            return
        while True:
            try:
                out.put(batch.copy(), timeout=1.0)
                break
            except queue.Full:
                if parent is None or not parent.is_alive():  # a killed sender: nobody will read
                    os._exit(0)
        batch.clear()

    run = settings(max_examples=chunk, deadline=None, database=None, phases=[Phase.generate],
                   suppress_health_check=list(HealthCheck))(given(request=requests(routes))(keep))
    while True:
        run()


def drawn(drawers: list[BaseProcess], batches: Queue[list[Request]], n: int) -> Iterator[Request]:
    """The first `n` requests the drawers hand over; raises if a drawer died (a bug of the
    strategies, its traceback on stderr) rather than waiting on it forever."""
    left = n
    while left > 0:
        try:
            batch = batches.get(timeout=1.0)
        except queue.Empty:
            batch = []
        if dead := [p.exitcode for p in drawers if p.exitcode is not None]:
            raise RuntimeError(f"a drawer died (exit code {dead[0]})")
        yield from batch[:left]
        left -= min(left, len(batch))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="requests to send (default 100000)")
    parser.add_argument("--chunk", type=int, default=10_000, help="requests per Hypothesis run (default 10000)")
    parser.add_argument("--drawers", type=int, default=2, help="processes drawing requests (default 2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for an answer")
    args = parser.parse_args()

    statuses: Counter[int | None] = Counter()
    problems: list[tuple[str, list[str]]] = []
    routes = served_routes()
    ctx = mp.get_context("spawn")  # a fresh interpreter: its own Hypothesis seed, none of our threads
    batches = ctx.Queue(maxsize=BACKLOG * args.drawers)
    drawers = [ctx.Process(target=draw_forever, args=(routes, args.chunk, batches), daemon=True)
               for _ in range(args.drawers)]
    for p in drawers:
        p.start()
    with tempfile.TemporaryDirectory(prefix="bench-api-fuzz-") as tmp:
        m = fuzz_mediator(Path(tmp))
        m.api.request_timeout = 2.0  # requests cut short by their client are answered sooner
        probe = StateProbe(m)
        address = m.api.server_address[:2]
        t0 = 0.0
        try:
            for sent, request in enumerate(drawn(drawers, batches, args.requests), 1):
                if sent == 1:
                    t0 = time.monotonic()  # from the first request drawn: the drawers' start-up is not the API's
                before = probe.snapshot()
                answer, follow_up = exchange(address, request, timeout=args.timeout)
                statuses[answer.status] += 1
                found = judge(answer, follow_up, before, probe.snapshot())
                if found:
                    problems.append((request.describe(), found))
                if sent % args.chunk == 0:
                    print(f"  {sent} requests, {sent / (time.monotonic() - t0):.0f}/s, {len(problems)} problems",
                          file=sys.stderr, flush=True)
        finally:
            elapsed = time.monotonic() - t0
            for p in drawers:
                p.terminate()  # drawers hold nothing but requests not needed any more
                p.join()
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
