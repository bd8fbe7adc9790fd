"""`mallory mediator`: run the gateway (firewall, ingest, API, recording) until stopped.

Run it in the gateway namespace. With `--run RUN` the node addresses and the control
address come from the run's layout (mallory/cluster/netns.py); otherwise give `--node n1=ADDR`
for every node and `--api HOST:PORT`.

With `--scenario FILE --messages FILE` it also runs the message layer (mallory/mediator/
message_layer.py): the declared peer ports' connections are relayed message by message
through a transparent proxy in the gateway, each message decided by the scenario's filters,
and the scenario's run is served at GET /scenario (`mallory scenario run` starts it so).
With `--filter-sets FILE --messages FILE` instead, the layer's messages go through whichever
of the file's filter sets a campaign put in force (POST /filters; `mallory fuzz
--filter-sets` starts it so), and through none while none is. Without them nothing of the
layer exists.

The API token comes from a file (`--token-file`, which should be readable by its owner
only) or from $MALLORY_TOKEN, never from the command line: any local user reads a
process's argv in /proc/<pid>/cmdline or `ps`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from mallory.errors import MalloryError
from mallory.mediator import API_PORT, BATCH_PORT
from mallory.mediator.message_layer import PROXY_PORT, LayerConfig

NAME = "mediator"
HELP = "run the mediator (gateway firewall on NFQUEUE, batch ingest, HTTP API) in the gateway namespace"

log = logging.getLogger(__name__)



def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", help="take nodes and control address from this netns run's layout")
    parser.add_argument("--node", action="append", default=[], metavar="NAME=ADDR", help="a node and its address (repeat)")
    parser.add_argument("--api", metavar="HOST:PORT", help=f"API address (default: the run's control address, port {API_PORT})")
    parser.add_argument("--batch", metavar="HOST:PORT", default=f"0.0.0.0:{BATCH_PORT}", help="observer batch address")
    parser.add_argument("--token-file", type=Path, metavar="FILE",
                        help="read the API token from FILE (mode 0600; default: the token in $MALLORY_TOKEN)")
    # Gone: refused with the way out (and it keeps argparse from taking `--token` as an
    # abbreviation of --token-file).
    parser.add_argument("--token", help=argparse.SUPPRESS)
    parser.add_argument("--queue-num", type=int, default=0, help="NFQUEUE number on FORWARD (default 0)")
    parser.add_argument("--no-firewall", action="store_true", help="no NFQUEUE, no iptables: ingest and API only")
    parser.add_argument(
        "--no-fail-open",
        action="store_true",
        help="when the mediator falls behind and its queue fills, drop packets (default: let them through "
        "unfaulted and unrecorded, so an overloaded mediator never adds loss the schedule did not ask for)",
    )
    parser.add_argument("--record", type=Path, metavar="DIR", help="write every ingested event to DIR/events.jsonl")
    parser.add_argument("--skew-ms", type=float, default=100.0, help="cross-node clock-skew bound (ms)")
    parser.add_argument("--ready-file", type=Path, help="write this file once the mediator serves")
    layer = parser.add_argument_group("message layer (a scenario, or the filter set in force, decides every message of "
                                      "the declared peer ports)")
    layer.add_argument("--scenario", type=Path, metavar="FILE", help="a scenario file (mallory/harness/scenario_file.py)")
    layer.add_argument("--filter-sets", type=Path, metavar="FILE",
                       help="named filter sets a campaign switches over POST /filters, one in force at a time "
                       "(mallory/harness/scenario_file.py)")
    layer.add_argument("--messages", type=Path, metavar="FILE",
                       help="the SUT's peer messages: the JSON file an observer's --messages reads")
    layer.add_argument("--catalogue", type=Path, metavar="FILE",
                       help="the SUT's annotation catalogue, which names code events for the scenario")
    layer.add_argument("--proxy-port", type=int, default=PROXY_PORT,
                       help="the proxy's port in the gateway (default %(default)s); its capture uses NFQUEUE "
                       "--queue-num + 1")
    advisor = parser.add_argument_group("Jepsen-driven mode (an external harness asks for its next fault)")
    advisor.add_argument("--advisor", action="store_true", help="serve /advisor/next with a learner")
    advisor.add_argument("--policy", default="qlearning", help="the advisor's policy (default qlearning)")
    advisor.add_argument("--seed", type=int, default=0, help="the advisor's seed")
    advisor.add_argument("--learner", type=Path, metavar="FILE",
                         help="checkpoint: resumed from if it exists, saved at every test end")


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise MalloryError(f"{what} {text!r}: expected HOST:PORT")
    return host, int(port)


def read_token(token_file: Path | None) -> str:
    """The API token: FILE's content without surrounding whitespace, or $MALLORY_TOKEN. A
    file others may read is used, with a warning: the token is only as secret as it."""
    if token_file is None:
        return os.environ.get("MALLORY_TOKEN", "")
    try:
        token = token_file.read_text().strip()
        mode = token_file.stat().st_mode
    except OSError as exc:
        raise MalloryError(f"--token-file {token_file}: {exc.strerror}") from None
    if mode & 0o077:
        print(f"mallory mediator: warning: --token-file {token_file} is readable by others (mode {mode & 0o777:o}); "
              "chmod 600 it", file=sys.stderr)
    return token


def _layer(args: argparse.Namespace) -> LayerConfig | None:
    """The message layer's configuration from --messages and --scenario or --filter-sets
    (none of them: no layer)."""
    if args.scenario is None and args.filter_sets is None and args.messages is None:
        return None
    if args.scenario is not None and args.filter_sets is not None:
        raise MalloryError("give --scenario FILE or --filter-sets FILE, not both: one decides the messages")
    if args.messages is None or (args.scenario is None and args.filter_sets is None):
        raise MalloryError("the message layer needs --messages FILE (the SUT's [messages]) and --scenario FILE "
                           "or --filter-sets FILE")
    from mallory.harness.scenario_file import load_filter_sets, load_scenario
    from mallory.instrument.catalogue import Catalogue
    from mallory.observer.messages import load_watch_file

    catalogue = Catalogue.load(args.catalogue) if args.catalogue is not None else Catalogue()
    scenario = load_scenario(args.scenario) if args.scenario is not None else None
    filter_sets = load_filter_sets(args.filter_sets) if args.filter_sets is not None else None
    return LayerConfig(load_watch_file(str(args.messages)), catalogue, capture_queue=args.queue_num + 1,
                       proxy_port=args.proxy_port, scenario=scenario, filter_sets=filter_sets)


def run(args: argparse.Namespace) -> int:
    from mallory.mediator.service import Mediator

    if args.token is not None:
        raise MalloryError("--token puts the secret in argv, where any local user reads it (ps, /proc/<pid>/cmdline): "
                           "use --token-file FILE (mode 0600) or $MALLORY_TOKEN")

    nodes: dict[str, str] = {}
    api_host = None
    if args.run:
        from mallory.cluster.netns import ClusterLayout

        layout = ClusterLayout.load(args.run)
        nodes = {n.name: n.address for n in layout.nodes}
        api_host = layout.gateway_control_address
    for spec in args.node:
        name, sep, addr = spec.partition("=")
        if not sep or not name or not addr:
            raise MalloryError(f"--node {spec!r}: expected NAME=ADDR")
        nodes[name] = addr
    if not nodes:
        raise MalloryError("no nodes: give --run RUN or --node NAME=ADDR")
    layer = _layer(args)
    if args.api:
        api = _address(args.api, "--api")
    elif api_host:
        api = (api_host, API_PORT)
    else:
        raise MalloryError("--api HOST:PORT is needed without --run")
    try:
        mediator = Mediator(
            nodes,
            token=read_token(args.token_file),
            api_address=api,
            batch_address=_address(args.batch, "--batch"),
            record_dir=args.record,
            queue_num=None if args.no_firewall else args.queue_num,
            fail_open=not args.no_fail_open,
            skew_ns=int(args.skew_ms * 1e6),
            layer=layer,
        )
    except OSError as exc:
        raise MalloryError(f"cannot listen: {exc}") from None
    except ValueError as exc:
        raise MalloryError(f"bad node address: {exc}") from None
    if args.advisor:
        from mallory.learner.learner import Learner
        from mallory.mediator.advisor import Advisor

        if args.learner is not None and args.learner.exists():
            learner = Learner.from_checkpoint(args.learner.read_bytes())
        else:
            learner = Learner.create(policy=args.policy, seed=args.seed)
        mediator.advisor = Advisor(mediator.windows, learner, checkpoint=args.learner)
    # The firewall thread is CPU-bound under load; with the default 5 ms GIL switch interval
    # an API request (a rule change) would wait that long for its turn.
    sys.setswitchinterval(0.0005)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        mediator.start()
    except OSError as exc:
        mediator.stop()
        raise MalloryError(f"cannot start the firewall (NFQUEUE {args.queue_num}; root in the gateway namespace?): {exc}") from None
    except BaseException:  # e.g. the message layer's rules refused: what did start is undone
        mediator.stop()
        raise
    try:
        log.info("mallory mediator: api http://%s:%d batches %s nodes %s", api[0], api[1], args.batch, nodes)
        if args.ready_file:
            args.ready_file.write_text(f"{os.getpid()}\n")
        while not stop.wait(0.5):
            if mediator.firewall.error is not None:
                raise MalloryError(f"firewall stopped: {mediator.firewall.error}")
            if mediator.layer is not None and mediator.layer.error is not None:
                raise MalloryError(f"the message layer stopped: {mediator.layer.error}")
            if mediator.stream_error is not None:
                raise MalloryError(f"the mediator's own event stream stopped: {mediator.stream_error!r}")
    finally:
        mediator.stop()
    return 0
