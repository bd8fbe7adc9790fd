"""`mallory cleanup [RUN...]`: remove what runs left behind, also after a `kill -9`."""

from __future__ import annotations

import argparse

from mallory.cluster.loopback import remove_dead_rings
from mallory.cluster.registry import (
    claimed,
    cleanup_all,
    cleanup_orphans,
    cleanup_run,
    list_runs,
    state_root,
)
from mallory.errors import MalloryError

NAME = "cleanup"
HELP = ("remove the namespaces, links, processes and shm segments of runs (all runs by default), "
        "and shm rings of loopback clusters whose process is gone")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run names (default: every registered run, or none with --orphans)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list everything removed")
    parser.add_argument("--orphans", action="store_true",
                        help="remove mal-* namespaces and mal<N>c links no registered run claims (left when "
                        "the state directory itself was lost); without RUN it touches no registered run")


def run(args: argparse.Namespace) -> int:
    if args.orphans and not args.runs:
        results = {"(orphans)": cleanup_orphans()}
    elif args.runs:
        # list_runs, not load_run: it also finds a run killed before its run.json was written.
        known = {record.name: record for record in list_runs()}
        missing = [name for name in args.runs if name not in known]
        if missing:
            raise MalloryError(f"no run named {', '.join(missing)} in {state_root()} (see `mallory cluster list`)")
        results = {name: cleanup_run(known[name]) for name in args.runs}
    else:
        results = cleanup_all()
    if args.orphans and args.runs:
        results["(orphans)"] = cleanup_orphans()
    if not args.runs:  # a named run is all that was asked for
        results["(loopback rings)"] = remove_dead_rings(claimed("shm"))
    for name, removed in results.items():
        print(f"run {name}: removed {len(removed)} things")
        if args.verbose:
            for thing in removed:
                print(f"  {thing}")
    return 0
