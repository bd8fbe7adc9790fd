"""`mallory observe`: the per-node observer, run inside the node before the SUT starts."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from mallory.errors import MalloryError
from mallory.mediator import BATCH_PORT
from mallory.observer import iptables
from mallory.observer.keepalive import KEEPALIVE, Keepalive
from mallory.observer.nflog import NfLog
from mallory.observer.nfq import COPY_RANGE, FULL_COPY, NfQueue
from mallory.observer.observer import Observer, clock_pair
from mallory.observer.sender import BatchSender

NAME = "observe"
HELP = "observe one node: NFQUEUE on INPUT/OUTPUT (+ shm ring), batches to the mediator"

log = logging.getLogger(__name__)

DEFAULT_MODE = "nfqueue"
DEFAULT_LOG_FILE = "{log_dir}/sut.log"


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


def _keepalive(text: str) -> Keepalive:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected IDLE,INTERVAL,PROBES, three positive integers")
    idle, interval, probes = (int(p) for p in parts)
    return Keepalive(idle, interval, probes)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", default=os.environ.get("MALLORY_NODE"), help="node name (default $MALLORY_NODE)")
    parser.add_argument("--run", help="netns run: take the peers and the mediator address from its layout")
    parser.add_argument("--mediator", type=_address, help=f"HOST:PORT of the mediator's batch port (default with --run: the node's gateway, port {BATCH_PORT})")
    parser.add_argument("--peer", action="append", default=[], help="address or CIDR of another node (repeatable)")
    parser.add_argument("--mode", choices=["nfqueue", "nflog"], default=DEFAULT_MODE,
                        help=f"nfqueue: packets pass through the observer (accepted at once); nflog: the kernel sends "
                        f"a copy and never waits (default {DEFAULT_MODE})")
    parser.add_argument("--queue", type=int, default=0, help="NFQUEUE number / NFLOG group in the node's namespace (default 0)")
    parser.add_argument("--queue-maxlen", type=int, default=16384,
                        help="NFQUEUE length; beyond it packets pass unobserved (fail-open) (default 16384)")
    parser.add_argument("--interval", type=float, default=0.1, help="batch interval in seconds (default 0.1)")
    parser.add_argument("--buffer-events", type=int, default=1_000_000, help="events buffered while the mediator is away (default 1e6)")
    parser.add_argument("--keepalive", type=_keepalive, default=KEEPALIVE, metavar="IDLE,INTERVAL,PROBES",
                        help="TCP keepalive toward the mediator: probes after IDLE s without a byte from it, "
                        "INTERVAL s apart; a mediator gone without a word is dropped after IDLE + "
                        f"INTERVAL x PROBES s (default {KEEPALIVE.idle_s},{KEEPALIVE.interval_s},{KEEPALIVE.probes}: "
                        f"{KEEPALIVE.dead_after_s} s)")
    parser.add_argument("--nice", type=int, default=-10, help="scheduling niceness (default -10: ahead of the SUT; 0 to keep)")
    parser.add_argument("--no-packets", action="store_true", help="do not capture packets (shm ring only)")
    parser.add_argument("--shm", default=os.environ.get("MALLORY_SHM"), help="shm ring to create and drain (default $MALLORY_SHM; none: packets only)")
    parser.add_argument("--ring-capacity", type=int, default=1 << 20, help="ring slots, a power of two (default 1Mi)")
    parser.add_argument("--log-events", metavar="FILE",
                        help="tail the node's logs for these patterns (a TOML SUT spec's [[log_events]], or JSON "
                        '{"log_events": [{"pattern", "name", "file"}]}): matching lines become LOG events')
    parser.add_argument("--log-file", default=DEFAULT_LOG_FILE,
                        help=f"the log an entry without `file` watches (default {DEFAULT_LOG_FILE}: the SUT's output)")
    parser.add_argument("--messages", metavar="FILE",
                        help="frame the TCP flows of the SUT's declared peer ports into messages: a TOML SUT spec "
                        "with a [messages] section, or the JSON file a campaign writes; packets there carry the "
                        "type names of the messages they start instead of payload hex (reads whole packets)")
    parser.add_argument("--log-cursor", metavar="PATH",
                        help="where the log tail saves how far it read, so a restarted observer resumes there "
                        "(default with --run: observer.log-cursor.json in the node's log dir)")


def _open_ring(name: str, capacity: int, node: str):
    """The node's shm ring, read from where the last reader stopped.

    The observer starts before the SUT and creates the ring the SUT's runtime opens
    (llvm-pass/RING.md). A restarted observer finds the ring its predecessor created, which
    a running SUT still writes to: it attaches to it and resumes at the cursor the previous
    reader published in the header, so nothing is read twice or skipped. The run's cleanup
    unlinks the ring: the SUT may outlive any observer.
    """
    from mallory.observer.ring import RingReader, create_ring, shm_path

    if os.path.exists(shm_path(name)):
        try:
            reader = RingReader(name, node=node)
        except MalloryError:
            pass  # not a ring of ours (or a torn one): replace it below
        else:
            reader.cursor = min(reader.published[0], reader.write_counter)
            return reader
    create_ring(name, capacity, exist_ok=True)
    return RingReader(name, node=node)


def _backlog(reader):
    """The reader's RingBacklog (imported here: only an observer with a ring needs it)."""
    from mallory.observer.ring import RingBacklog

    return RingBacklog(reader)


def _log_watcher(args: argparse.Namespace):
    """The LogWatcher for --log-events, its cursor in --log-cursor (or the node's log dir).
    File templates take {node} {index} {address} {data_dir} {log_dir} (from --run) and the
    TOML spec's {port_<name>}."""
    from mallory.observer import log_events

    patterns, ports = log_events.load_log_events(args.log_events)
    values: dict[str, object] = {"node": args.node, **{f"port_{k}": v for k, v in ports.items()}}
    cursor_path = args.log_cursor
    if args.run:
        from mallory.cluster.netns import NetnsCluster

        cluster = NetnsCluster.attach(args.run)
        values.update(
            index=cluster.layout.names.index(args.node) + 1,
            address=cluster.node_address(args.node),
            data_dir=str(cluster.data_dir(args.node)),
            log_dir=str(cluster.log_dir(args.node)),
        )
        cursor_path = cursor_path or str(cluster.log_dir(args.node) / "observer.log-cursor.json")
    where = f"observe --log-events {args.log_events}"
    watched = log_events.resolve(
        patterns,
        lambda t: log_events.expand_template(t, values, where),
        log_events.expand_template(args.log_file, values, "observe --log-file"),
    )
    return log_events.LogWatcher(args.node, watched, cursor_path)


def _message_splitter(path: str):
    """The MessageSplitter for --messages: a TOML spec's [messages] with its ports, or a
    JSON file mallory/observer/messages.py wrote."""
    from mallory.observer.framing import MessageSplitter
    from mallory.observer.messages import load_watch_file, peer_messages

    if path.endswith(".toml"):
        from mallory.harness.spec import load_spec

        spec = load_spec(path)
        if spec.messages is None:
            raise MalloryError(f"observe --messages {path}: the spec has no [messages] section")
        return MessageSplitter(peer_messages(spec.messages, spec.ports, path))
    return MessageSplitter(load_watch_file(path))


def run(args: argparse.Namespace) -> int:
    if not args.node:
        raise MalloryError("observe: no node name (give --node or set MALLORY_NODE)")
    peers, mediator = list(args.peer), args.mediator
    if args.run:
        from mallory.cluster.netns import ClusterLayout

        layout = ClusterLayout.load(args.run)
        me = layout.node(args.node)
        peers += [n.address for n in layout.nodes if n.name != args.node]
        mediator = mediator or (me.gateway_address, BATCH_PORT)
    if mediator is None:
        raise MalloryError("observe: no mediator address (give --mediator HOST:PORT or --run)")
    if args.interval <= 0:
        raise MalloryError(f"observe: --interval {args.interval}: must be > 0")

    if args.nice:
        # The observer sits in the SUT's data path (every packet waits for its verdict):
        # on a busy machine it should not wait behind the SUT for the CPU.
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)
        except OSError as exc:
            log.warning("observe %s: cannot set nice %d: %s", args.node, args.nice, exc)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    messages = _message_splitter(args.messages) if args.messages and not args.no_packets else None
    queue = None
    if not args.no_packets:
        # Bind first, then add the rules: no packet is ever queued to an unbound queue.
        copy = FULL_COPY if messages is not None else COPY_RANGE  # framing reads whole packets
        queue = (NfLog(args.queue, copy_range=copy) if args.mode == "nflog"
                 else NfQueue(args.queue, maxlen=args.queue_maxlen, copy_range=copy))
        iptables.install(args.queue, peers, args.mode)
    logs = _log_watcher(args) if args.log_events else None
    reader = _open_ring(args.shm, args.ring_capacity, args.node) if args.shm else None
    sender = BatchSender(clock_pair(args.node), mediator, capacity_events=args.buffer_events,
                         keepalive=args.keepalive).start()
    observer = Observer(
        args.node,
        queue,
        sender,
        interval=args.interval,
        ring=_backlog(reader) if reader else None,
        ring_lost=(lambda: reader.lost_total) if reader else None,
        logs=logs,
        messages=messages,
    )
    log.info("observe %s: %s %d peers %s ring %s mediator %s:%d messages on ports %s", args.node, args.mode,
             args.queue, ",".join(peers), args.shm or "-", *mediator,
             ",".join(map(str, sorted(messages.ports))) if messages else "-")
    try:
        observer.run(stop)
    finally:
        # Rules first (no new packet is queued), then what is queued, then the queue.
        if queue is not None:
            iptables.remove()
        observer.finish()
        if queue is not None:
            queue.close()
        if reader is not None:
            reader.close()
        if logs is not None:
            logs.close()
        sender.flush(1.0)
        sender.close()
        # ETIMEDOUT: the mediator went without a word (mallory/observer/sender.py)
        ended = ", ".join(f"{cause} {n}" for cause, n in sorted(sender.stats.ended.items()))
        log.info(
            f"observe {args.node}: {observer.packets} packets, {observer.batches} batches, "
            f"{observer.ring_events} ring events, {observer.log_events} log events, "
            f"{queue.received / max(queue.reads, 1) if queue else 0:.1f} packets per read, "
            f"{queue.lost if queue else 0} lost in the queue, "
            f"{reader.lost_total if reader else 0} lost in the ring, "
            f"{sender.stats.dropped_events} dropped while the mediator was away, "
            f"{sender.stats.connects} connections to it, ended: {ended or 'none'}"
        )
    return 0
