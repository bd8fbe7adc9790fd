"""`mallory workload`: run a client workload against an SUT and record its history."""

from __future__ import annotations

import argparse
from pathlib import Path

from mallory.cluster.loopback import LoopbackBackend
from mallory.errors import MalloryError
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import DISTRIBUTIONS, WORKLOADS, make_workload
from mallory.suts.registry import BUILTIN_SUTS, check_workload, make_adapter

NAME = "workload"
HELP = "run a register / list-append / rw-register workload against an SUT and write its history"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sut", required=True, help=f"a TOML SUT spec, or a built-in: {', '.join(BUILTIN_SUTS)}")
    parser.add_argument("--port", type=int, default=6379, help="client port of a built-in SUT (default 6379)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run", help="a network-namespace run (`mallory cluster up --name RUN`) to use")
    where.add_argument("--nodes", type=int, default=3, help="loopback nodes when no --run (default 3)")
    parser.add_argument("--workload", choices=WORKLOADS, default="list-append")
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--rate", type=float, default=None, help="ops/s over all workers (default: unlimited)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument("--key-count", type=int, default=None, help="keys in use at a time")
    parser.add_argument("--key-distribution", choices=DISTRIBUTIONS, default=None)
    parser.add_argument("--max-writes-per-key", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="directory for history.edn and history.jsonl")
    parser.add_argument("--keep", action="store_true", help="leave the SUT running afterwards")


def _workload_options(args: argparse.Namespace) -> dict:
    options: dict = {}
    if args.key_count is not None:
        options["key_count"] = args.key_count
    if args.workload != "register":
        if args.key_distribution is not None:
            options["distribution"] = args.key_distribution
        if args.max_writes_per_key is not None:
            options["max_writes_per_key"] = args.max_writes_per_key
    elif args.key_distribution is not None or args.max_writes_per_key is not None:
        raise MalloryError("--key-distribution and --max-writes-per-key apply to txn workloads, not register")
    return options


def run(args: argparse.Namespace) -> int:
    for name in ("history.edn", "history.jsonl"):
        if (args.out / name).exists():
            raise MalloryError(f"{args.out / name} exists: a workload writes a new history; choose another --out")
    check_workload(args.sut, args.workload)
    workload = make_workload(args.workload, **_workload_options(args))
    config = RunConfig(
        concurrency=args.concurrency, time_limit=args.time_limit, rate=args.rate, seed=args.seed
    )
    if args.run:
        from mallory.cluster.netns import NetnsCluster

        backend = NetnsCluster.attach(args.run)
        own_backend = None
    else:
        own_backend = backend = LoopbackBackend(args.nodes)
    adapter = make_adapter(args.sut, backend, args.port)
    try:
        start_all(adapter)
        summary = record_run(adapter, workload, config, args.out)
    finally:
        if not args.keep:
            teardown_all(adapter)
            if own_backend is not None:
                own_backend.destroy()
    done = ", ".join(f"{n} {t}" for t, n in sorted(summary.completions.items()))
    print(
        f"{workload.name} on {adapter.name} ({backend.name}, {len(backend.nodes)} nodes): "
        f"{summary.invokes} ops in {summary.elapsed:.1f} s ({done}); {summary.processes} processes"
    )
    print(f"history: {args.out / 'history.edn'} and {args.out / 'history.jsonl'}")
    return 0
