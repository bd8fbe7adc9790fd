"""`mallory cleanup [RUN...]`: remove what runs left behind, also after a `kill -9`."""

from __future__ import annotations

import argparse

from nemesis.runstate import cleanup_all, cleanup_run, load_run

NAME = "cleanup"
HELP = "remove the namespaces, links, processes and shm segments of runs (all runs by default)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run names (default: every registered run)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list everything removed")


def run(args: argparse.Namespace) -> int:
    if args.runs:
        results = {name: cleanup_run(load_run(name)) for name in args.runs}
    else:
        results = cleanup_all()
    for name, removed in results.items():
        print(f"run {name}: removed {len(removed)} things")
        if args.verbose:
            for thing in removed:
                print(f"  {thing}")
    return 0
