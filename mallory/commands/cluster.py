"""`mallory cluster up|down|list`: bring a network-namespace cluster up, take it down.

A run made by `cluster up` is detached: no process owns it once the command returns, so
`mallory cleanup` without arguments keeps it; `cluster down RUN` removes it. `cluster list`
says of each run whether it is live (its owner runs), detached, or stale (what `mallory
cleanup` removes).
"""

from __future__ import annotations

import argparse
import json

from mallory.cluster.netns import NetnsCluster
from mallory.cluster.registry import detach_run, list_runs, run_status

NAME = "cluster"
HELP = "create or remove a network-namespace cluster (gateway + N nodes)"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="create a run: gateway namespace, N node namespaces, links, routes")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--name", required=True, help="run name (a-z, 0-9, '-')")
    up.add_argument("--json", action="store_true", help="print the layout as JSON")
    down = sub.add_parser("down", help="kill a run's processes and remove everything it created")
    down.add_argument("name", help="run name")
    sub.add_parser("list", help="list the registered runs, one JSON object a line, with their status "
                   "(live: its owner runs; detached: made by `cluster up`; stale: `mallory cleanup` removes it)")


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        cluster = NetnsCluster.up(args.name, args.nodes)
        detach_run(cluster.record)  # it is for use by hand: it outlives this command
        lay = cluster.layout
        if args.json:
            print(lay.to_json())
        else:
            print(f"run {lay.run}: gateway {lay.gateway_namespace} control {lay.gateway_control_address}")
            for node in lay.nodes:
                print(f"  {node.name} {node.namespace} {node.address} via {node.gateway_interface}")
        return 0
    if args.action == "down":
        cluster = NetnsCluster.attach(args.name)
        removed = cluster.down()
        print(f"run {args.name}: removed {len(removed)} things")
        return 0
    for record in list_runs():
        print(json.dumps({"name": record.name, "index": record.index, "state": str(record.state_dir),
                          "status": run_status(record), "owner": record.owner.pid if record.owner else None}))
    return 0
