"""`mallory cleanup [RUN...]`: remove what runs left behind, also after a `kill -9`.

Only stale runs (their owner process is gone) are removed: a live run belongs to a
campaign running beside the user, and is kept, saying so, unless `--force`. A detached run
(`mallory cluster up`) is kept by the sweep over every run, and removed when named.
"""

from __future__ import annotations

import argparse

from mallory.cluster.loopback import remove_dead_rings
from mallory.cluster.registry import (
    RunRecord,
    RunStatus,
    claimed,
    cleanup_all,
    cleanup_orphans,
    cleanup_run,
    list_runs,
    run_status,
    state_root,
)
from mallory.errors import MalloryError

NAME = "cleanup"
HELP = ("remove the namespaces, links, processes and shm segments of runs whose owner is gone (all such runs by "
        "default), and shm rings of loopback clusters whose process is gone")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run names (default: every stale registered run, or none with --orphans)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list everything removed")
    parser.add_argument("--force", action="store_true",
                        help="also remove live runs (their owner, e.g. a `mallory fuzz`, still runs: it will fail) "
                        "and, without RUN, detached ones (`mallory cluster up`)")
    parser.add_argument("--orphans", action="store_true",
                        help="remove mal-* namespaces and mal<N>c links no registered run claims (left when "
                        "the state directory itself was lost); without RUN it touches no registered run")


def _kept_message(record: RunRecord, status: RunStatus) -> str:
    if status == "live":
        return f"run {record.name}: live (its owner, pid {record.owner.pid}, still runs), kept; --force removes it"
    return (f"run {record.name}: detached (made by `mallory cluster up`), kept; "
            f"`mallory cluster down {record.name}` or `mallory cleanup {record.name}` removes it")


def run(args: argparse.Namespace) -> int:
    kept: list[tuple[RunRecord, RunStatus]] = []
    if args.orphans and not args.runs:
        results = {"(orphans)": cleanup_orphans()}
    elif args.runs:
        # list_runs, not load_run: it also finds a run killed before its run.json was written.
        known = {record.name: record for record in list_runs()}
        missing = [name for name in args.runs if name not in known]
        if missing:
            raise MalloryError(f"no run named {', '.join(missing)} in {state_root()} (see `mallory cluster list`)")
        # A run named here is removed unless it is live: detached runs too.
        named = [(known[name], run_status(known[name])) for name in dict.fromkeys(args.runs)]
        kept = [(record, status) for record, status in named if status == "live" and not args.force]
        results = {record.name: cleanup_run(record) for record, status in named if status != "live" or args.force}
    else:
        results, kept = cleanup_all(force=args.force)
    if args.orphans and args.runs:
        results["(orphans)"] = cleanup_orphans()
    if not args.runs:  # a named run is all that was asked for
        results["(loopback rings)"] = remove_dead_rings(claimed("shm"))
    for record, status in kept:
        print(_kept_message(record, status))
    for name, removed in results.items():
        print(f"run {name}: removed {len(removed)} things")
        if args.verbose:
            for thing in removed:
                print(f"  {thing}")
    return 0
