"""`mallory trace --shm NAME`: print an instrumented program's code events live, named through
its catalogue, so users can check their annotations fire where and when they expect.

The ring is the program's MALLORY_SHM. In a cluster the node's observer makes it; for a
program run by hand, `--create` makes it when there is none (and removes it when trace
ends), so the program, started afterwards with MALLORY_SHM=NAME, writes into it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.observer.ring import (
    DEFAULT_CAPACITY,
    RingReader,
    create_ring,
    shm_path,
    unlink_ring,
)
from mallory.timeline.codec import encode

NAME = "trace"
HELP = "print code events from a shared-memory ring (MALLORY_SHM) as they happen"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shm", required=True, help="the ring's name, as given to the program in MALLORY_SHM")
    parser.add_argument("--create", action="store_true",
                        help="make the ring if there is none (removed again when trace ends); start the program after")
    parser.add_argument("--ring-capacity", type=int, default=DEFAULT_CAPACITY,
                        help="slots of a ring --create makes, a power of two (default 1Mi)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--catalogue", help="catalogue JSON to name events (<binary>.mallory.json)")
    source.add_argument("--binary", help="the instrumented binary (its catalogue is <binary>.mallory.json)")
    parser.add_argument("--node", default="local", help="node name to label events with (default: local)")
    parser.add_argument("--from-start", action="store_true", help="also print events already in the ring")
    parser.add_argument("--count", type=int, default=0, help="stop after this many events (0: no limit)")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between polls (default 0.05)")
    parser.add_argument("--json", action="store_true", help="one event record per line (the wire codec)")


def run(args: argparse.Namespace) -> int:
    path = args.catalogue or (catalogue_path(args.binary) if args.binary else None)
    catalogue = Catalogue.load(path) if path else Catalogue()
    absent = not os.path.exists(shm_path(args.shm))
    if absent and not args.create:
        raise MalloryError(f"no shared-memory ring named {args.shm!r}: a cluster node's observer makes it; for a "
                           f"program run by hand give --create, then start it with MALLORY_SHM={args.shm}")
    created = absent
    if created:
        create_ring(args.shm, args.ring_capacity)
        log.info("created the ring %s: start the program with MALLORY_SHM=%s", args.shm, args.shm)
    try:
        return _trace(args, catalogue)
    finally:
        if created:
            unlink_ring(args.shm)


def _trace(args: argparse.Namespace, catalogue: Catalogue) -> int:
    shown = 0
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    out = sys.stdout
    with RingReader(args.shm, node=args.node, start="beginning" if args.from_start else "now") as reader:
        while True:
            remaining = args.count - shown if args.count else None
            for event in reader.poll_events(remaining):
                if args.json:
                    out.write(encode(event).decode() + "\n")
                else:
                    entry = catalogue.get(event.id)
                    where = f"  {entry.location} {entry.function}" if entry else ""
                    out.write(f"{event.ts} {event.node} {event.kind.name:<5} {catalogue.name(event.id)}{where}\n")
                shown += 1
            out.flush()
            if (args.count and shown >= args.count) or (deadline and time.monotonic() >= deadline):
                break
            time.sleep(args.interval)
        log.info("trace: %d events shown, %d lost", shown, reader.lost_total)
    return 0
