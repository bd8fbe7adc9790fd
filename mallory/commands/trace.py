"""`mallory trace --shm NAME`: print an instrumented program's code events live, named through
its catalogue, so users can check their annotations fire where and when they expect."""

from __future__ import annotations

import argparse
import sys
import time

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.observer.ring import RingReader
from mallory.timeline.codec import encode

NAME = "trace"
HELP = "print code events from a shared-memory ring (MALLORY_SHM) as they happen"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shm", required=True, help="the ring's name, as given to the program in MALLORY_SHM")
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
        print(f"trace: {shown} events shown, {reader.lost_total} lost", file=sys.stderr)
    return 0
