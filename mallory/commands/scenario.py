"""`mallory scenario run SCENARIO.py --sut NAME`: a Netrix-style unit test on a fresh cluster.

    mallory scenario run suts/example/scenarios/sticky_leader.py --sut suts/example/example-bugs.toml

Brings up a network-namespace cluster with the mediator as gateway and an observer per node,
the mediator running the message layer with the scenario (mallory/mediator/message_layer.py:
every message of the SUT's declared peer ports goes through the scenario's filters, from the
SUT's first connection on), starts the SUT and waits until it is ready, invokes the
scenario's SETUP client operations one after the other (each on the nodes in turn until one
answers ok; each relayed to the mediator, so the state machine sees it as client events),
then waits until the state machine reaches a final verdict or TIMEOUT_S has passed since
SETUP began. SETUP may also wait for a state of the machine and pause a node for a while
(mallory/harness/scenario_file.py). It prints the verdict, the path through the state
machine and what became of the messages per link and type, and tears everything down,
whatever happened.

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
    nodes = [f"n{k}" for k in range(1, args.nodes + 1)]  # the cluster's names (mallory/cluster/netns.py)
    if strangers := [step["pause"] for step in scenario.setup if "pause" in step and step["pause"] not in nodes]:
        raise MalloryError(f"scenario {args.scenario}: SETUP pauses {strangers[0]}, not a node of {args.nodes}")
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
            run_setup(scenario, adapter, stack.client, args.workload, deadline)
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


def run_setup(scenario: Scenario, adapter: Any, mediator: Any, workload_name: str, deadline: float,
              sleep: Callable[[float], None] = time.sleep) -> None:
    """SETUP's steps in order, until the deadline: a client operation on the nodes in turn
    until one completes it ok (a follower refuses a write), its invocation and completion
    relayed to the mediator; an await until the state machine has been in its state; a
    pause of a node, relayed as fault events, the node resumed whatever happens."""
    workload = make_workload(workload_name)
    process = 0
    for step in scenario.setup:
        if time.monotonic() >= deadline:
            log.info("setup: the timeout passed before %r", dict(step))
            return
        if "await" in step:
            await_state(mediator, step["await"], deadline, sleep)
        elif "pause" in step:
            pause(adapter, mediator, step["pause"], step["for_s"], sleep)
        else:
            run_op(adapter, mediator, workload, process, step)
            process += 1


def run_op(adapter: Any, mediator: Any, workload: Any, process: int, op: Mapping[str, Any]) -> None:
    """One client operation, on the nodes in turn until one completes it ok."""
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


def await_state(mediator: Any, state: str, deadline: float, sleep: Callable[[float], None]) -> None:
    """Until the scenario's run has been in `state`, has ended, or the deadline passed."""
    while time.monotonic() < deadline:
        report = mediator.scenario()
        if state in report["states"] or report["ended"]:
            log.info("setup: the run has been in %s", state)
            return
        sleep(POLL_S)


def pause(adapter: Any, mediator: Any, node: str, for_s: float, sleep: Callable[[float], None]) -> None:
    """Pause `node`'s SUT for `for_s` seconds, each change a fault event ("pause:n1",
    "resume:n1"); it is resumed whatever happens meanwhile."""
    from mallory.harness.adapter import Pausable

    if node not in adapter.backend.nodes:
        raise MalloryError(f"SETUP pauses {node}, not a node of this cluster ({', '.join(adapter.backend.nodes)})")
    if not isinstance(adapter, Pausable):
        raise MalloryError(f"SETUP pauses {node}, but {adapter.name} cannot pause a node")
    adapter.pause(node)
    try:
        mediator.fault_reported(f"pause:{node}")
        log.info("setup: paused %s for %g s", node, for_s)
        sleep(for_s)
    finally:
        adapter.resume(node)
        mediator.fault_reported(f"resume:{node}")


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
