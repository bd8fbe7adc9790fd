"""`mallory scenario run SCENARIO.py --sut NAME`: a Netrix-style unit test on a fresh cluster.

    mallory scenario run suts/example/scenarios/sticky_leader.py --sut suts/example/example-bugs.toml

Brings up a network-namespace cluster with the mediator as gateway and an observer per node,
the mediator running the message layer with the scenario (mallory/mediator/message_layer.py:
every message of the SUT's declared peer ports goes through the scenario's filters, from the
SUT's first connection on), starts the SUT and waits until it is ready, invokes the
scenario's SETUP client operations one after the other (each on the nodes in turn until one
answers ok; each relayed to the mediator, so the state machine sees it as client events),
then waits until the state machine reaches a final verdict or TIMEOUT_S has passed since
SETUP began. It prints the verdict, the path through the state machine and what became of
the messages per link and type, and tears everything down, whatever happened.

Exit codes: 0 the scenario passed (a success state), 1 it failed (its fail state, or the
timeout outside a success state), 254 bad input (the scenario file, an SUT without
`[messages]`, a workload its client cannot run: one line saying what), 69 the mediator
died during the run (its log is named), 130 Ctrl-C, 255 a bug of ours. Needs root (network
namespaces, iptables, TPROXY in the gateway).
"""

from __future__ import annotations

import argparse
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mallory.errors import ExitCode, MalloryError
from mallory.harness.workload import WORKLOADS, make_workload
from mallory.scenario.engine import Scenario

NAME = "scenario"
HELP = "run a Netrix-style scenario (filters over messages, setup, state machine) on a fresh cluster: exit 0 pass, 1 fail"

log = logging.getLogger(__name__)
#: how often the mediator is asked how the run goes
POLL_S = 0.2


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run_parser = sub.add_parser("run", help="run one scenario file; exit 0 when it passes, 1 when it fails")
    run_parser.add_argument("scenario", type=Path, help="the scenario file (see mallory/harness/scenario_file.py)")
    run_parser.add_argument("--sut", required=True, help="a TOML SUT spec with [messages], or a built-in")
    run_parser.add_argument("--nodes", type=int, default=3, help="cluster size (default %(default)s)")
    run_parser.add_argument("--port", type=int, default=6379, help="client port of a built-in SUT")
    run_parser.add_argument("--workload", choices=WORKLOADS, default="register",
                            help="the client SETUP's operations go through (default %(default)s)")
    run_parser.add_argument("--record", type=Path, metavar="DIR",
                            help="write the run's events to DIR/events.jsonl (mallory report / export read them)")


def run(args: argparse.Namespace) -> int:
    from mallory.harness.scenario_file import load_scenario
    from mallory.suts.registry import check_workload, resolve_sut

    if not 1 <= args.nodes <= 250:
        raise MalloryError(f"--nodes {args.nodes}: a cluster has 1..250 nodes")
    scenario = load_scenario(args.scenario)
    sut = resolve_sut(args.sut)
    check_workload(sut, args.workload)
    report = run_scenario(scenario, args.scenario.resolve(), sut, args)
    for line in report["lines"]:
        print(line)
    print(f"events stepped: {report['events']}")
    for link, by_type in report["messages"].items():
        for type_, counts in by_type.items():
            print(f"  {link} {type_}: " + " ".join(f"{what} {n}" for what, n in sorted(counts.items())))
    return ExitCode.OK if report["passed"] else ExitCode.FAILED


def run_scenario(scenario: Scenario, path: Path, sut: str, args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's final report (ScenarioDriver.report) after a run on a fresh cluster."""
    from mallory.harness.session import start_all, teardown_all

    with observed_cluster(sut, path, args) as stack:
        adapter = stack.adapter
        start_all(adapter)
        try:
            deadline = time.monotonic() + scenario.timeout_s
            run_setup(scenario, adapter, stack.client, args.workload)
            return await_verdict(stack, deadline)
        finally:
            teardown_all(adapter)


@contextmanager
def observed_cluster(sut: str, path: Path, args: argparse.Namespace) -> Iterator[Any]:
    """The observed netns cluster with the mediator running the scenario (the unit tests
    put a fake in its place)."""
    from mallory.campaign.netns_stack import ObservedCluster
    from mallory.campaign.observed import message_layer_args
    from mallory.suts.registry import make_adapter

    with ObservedCluster("sc" + secrets.token_hex(3), args.nodes, record_dir=args.record,
                         adapter_factory=lambda backend: make_adapter(sut, backend, args.port),
                         mediator_args=lambda adapter: message_layer_args(adapter, sut, ["--scenario", str(path)])
                         ) as stack:
        yield stack


def run_setup(scenario: Scenario, adapter: Any, mediator: Any, workload_name: str) -> None:
    """Each SETUP operation in order, on the nodes in turn until one completes it ok (a
    follower refuses a write); invocation and completion relayed to the mediator."""
    workload = make_workload(workload_name)
    for process, op in enumerate(scenario.setup):
        invocation: Mapping[str, Any] = {"f": op["f"], "value": op.get("value")}
        outcome = "fail"
        mediator.client_op(process, "invoke", invocation["f"])
        for node in adapter.backend.nodes:
            client = adapter.client(node, workload)
            try:
                client.open()
                outcome = client.invoke(invocation).type
            finally:
                client.close()
            if outcome == "ok":
                break
        mediator.client_op(process, outcome, invocation["f"])
        log.info("setup: %s %r: %s", invocation["f"], invocation["value"], outcome)


def await_verdict(stack: Any, deadline: float, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Ask the mediator until the run has ended or the deadline has passed; the last answer.
    A mediator that stops answering is checked for death (ComponentDied, exit 69)."""
    while True:
        try:
            report = stack.client.scenario()
        except MalloryError:
            stack.revive_dead()  # raises ComponentDied when the mediator is gone
            raise
        if report["ended"] or time.monotonic() >= deadline:
            return report
        sleep(POLL_S)
