"""Message layer cost (issue 19): messages/s and round-trip latency of a peer connection
through the gateway's message layer (the TPROXY proxy of mallory/mediator/proxy.py with
its divert rules and leg capture, MessageStream framing, a scenario's engine deciding every
message), against the same traffic through the mediator without the layer, in one run.

Run as root: `.venv/bin/python bench/bench_message_layer.py [--seconds 5] [--round-trips 2000]`.
It brings up a 2-node netns run and needs no SUT build: its peer protocol is its own, text
lines on port PEER_PORT ("ping <seq>\\n" from n1, "pong <seq>\\n" back from n2), declared in
an SUT spec it writes into the gateway's data directory with a scenario whose FILTERS are
empty (every message delivered) and whose state machine never ends the run (an ended run
would deliver everything without asking the engine). Twice, first with `mallory mediator`
plain (its FORWARD queue sees every packet), then with `--scenario FILE --messages FILE`:

    throughput   n1 writes the stream as fast as TCP takes it for --seconds; the messages
                 n2 read in that time, per second (the stream is checked byte for byte)
    round trips  n1 sends "ping <i>", n2 answers "pong <i>" on the same connection, one at
                 a time: p50/p99 of the round trip, after --warmup unmeasured ones

and prints both with the ratios with/without. The plain path's throughput is above what the
mediator's FORWARD queue gives verdicts for: the packets beyond it pass unqueued (fail-open),
as in a campaign, so it is what the SUT's traffic gets without a scenario. A run of the layer that relayed no message
through the proxy stops the bench (the diversion did not take: its numbers would be the
plain path's). Sender and receiver are threads of this process, their sockets made in the
nodes' namespaces; the sender resends one prebuilt buffer of messages (seq wraps at
STREAM_MESSAGES) so that neither end costs Python per message. Numbers on a shared 2-core
machine are noisy; the ratios within one run are the thing to compare. Everything is removed
on exit, Ctrl-C and SIGTERM; after a kill -9, `mallory cleanup` (the run is journaled).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mallory.campaign.progress import percentile  # noqa: E402
from mallory.harness.scenario_file import load_scenario  # noqa: E402
from mallory.harness.spec import load_spec  # noqa: E402
from mallory.observer.messages import peer_messages, write_watch_file  # noqa: E402

CLIENT_PORT = 7200  # a spec needs one; nothing listens on it
PEER_PORT = 7201
#: messages in the sender's buffer ("ping 0\n" ... "ping 99999\n", 1.1 MB), sent round and round
STREAM_MESSAGES = 100_000
#: progress.percentile looks at the last 10 000 values only
MAX_ROUND_TRIPS = 10_000
READ_SIZE = 1 << 16
#: how long a blocked socket call waits before the loop looks at its deadline again
POLL_S = 0.2

#: The bench's peer protocol as an SUT spec: lines, typed by their second byte ("ping":
#: 'i' = 105, "pong": 'o' = 111), since both start with 'p'. Never started: the command is
#: there because a spec needs one.
SPEC = f"""\
name = "bench-ping"

[start]
command = ["true"]

[ports]
client = {CLIENT_PORT}
peer = {PEER_PORT}

[messages]
ports = ["peer"]
delimiter = "\\n"
type = {{ offset = 1, size = 1, default = "other", names = {{ "105" = "ping", "111" = "pong" }} }}
"""

#: Every message delivered (no filter), and a run that never ends: its one way to success
#: waits for an event no one emits, so the engine steps on every message of the bench.
SCENARIO = """\
from mallory.scenario import *

FILTERS = []
STATE_MACHINE = StateMachine()
STATE_MACHINE.builder().on(IsEventType("never"), SUCCESS)
TIMEOUT_S = 3600
"""


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _round_trips(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ROUND_TRIPS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_ROUND_TRIPS}, not {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=_positive_float, default=5.0, help="each throughput run (default 5)")
    parser.add_argument("--round-trips", type=_round_trips, default=2000,
                        help=f"measured round trips per run, 1..{MAX_ROUND_TRIPS} (default 2000)")
    parser.add_argument("--warmup", type=_count, default=100, help="unmeasured round trips first (default 100)")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class LayerFiles:
    """What the mediator's message layer is started with (`mediator_args`)."""

    spec: Path
    messages: Path
    scenario: Path

    def mediator_args(self) -> list[str]:
        return ["--scenario", str(self.scenario), "--messages", str(self.messages)]


def write_layer_files(directory: Path) -> LayerFiles:
    """The spec, the messages file the mediator reads (as `mallory scenario run` writes it
    from a spec: campaign/observed.py, message_layer_args) and the scenario, in `directory`;
    each loaded once here, so a mistake in them fails before anything starts."""
    files = LayerFiles(directory / "bench-ping.toml", directory / "bench-ping-messages.json",
                       directory / "deliver-all.py")
    files.spec.write_text(SPEC)
    spec = load_spec(files.spec)
    assert spec.messages is not None
    write_watch_file(str(files.messages), peer_messages(spec.messages, spec.ports, str(files.spec)))
    files.scenario.write_text(SCENARIO)
    load_scenario(files.scenario)
    return files


class PingStream:
    """The sender's bytes, `data`: messages "ping <seq>\\n", seq 0..count-1; sent round and
    round. `received` checks a receiver's chunks against it: in order, each the stream's
    next bytes (wrapping), nothing lost, changed or repeated."""

    def __init__(self, count: int = STREAM_MESSAGES) -> None:
        self.data = b"".join(b"ping %d\n" % seq for seq in range(count))
        self.intact = True
        self._at = 0  # where the next byte received should be in `data`

    def received(self, chunk: bytes) -> bool:
        """Whether everything received so far, `chunk` the latest, is the stream's start."""
        size, done = len(self.data), 0
        while done < len(chunk) and self.intact:
            take = min(len(chunk) - done, size - self._at)
            self.intact = chunk[done:done + take] == self.data[self._at:self._at + take]
            done += take
            self._at = (self._at + take) % size
        return self.intact


@dataclass(frozen=True)
class Measurement:
    """One configuration's numbers: messages/s n1 -> n2, whether the stream arrived intact,
    the round trips (ms), and how many messages the proxy relayed (None: no layer)."""

    messages_per_s: float
    intact: bool
    rtts_ms: list[float]
    relayed: int | None = None


def ratio(with_layer: float | None, without: float | None) -> str:
    """with/without: 2 decimals, 2 significant digits below 0.1 (the layer's throughput
    can be a few thousandths of the plain path's); "n/a" when either is missing or
    without is 0."""
    if with_layer is None or not without:
        return "n/a"
    value = with_layer / without
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def report(without: Measurement, with_layer: Measurement) -> list[str]:
    """The table printed at the end: each number without and with the layer and their
    ratio, then the latency the layer adds per message (a round trip is two messages)."""
    rows = [("throughput, messages/s n1->n2", without.messages_per_s, with_layer.messages_per_s, ",.0f")]
    for name, p in (("round trip p50, ms", 0.5), ("round trip p99, ms", 0.99)):
        rows.append((name, percentile(without.rtts_ms, p, 3), percentile(with_layer.rtts_ms, p, 3), ".3f"))
    lines = [f"{'':32}{'without layer':>16}{'with layer':>16}{'with/without':>14}"]
    for name, a, b, fmt in rows:
        shown = [format(v, fmt) if v is not None else "n/a" for v in (a, b)]
        lines.append(f"{name:32}{shown[0]:>16}{shown[1]:>16}{ratio(b, a):>14}")
    p50_without, p50_with = percentile(without.rtts_ms, 0.5, 3), percentile(with_layer.rtts_ms, 0.5, 3)
    if p50_without is not None and p50_with is not None:
        added = p50_with - p50_without
        lines.append(f"added latency (p50): {added:+.3f} ms per round trip, {added / 2:+.3f} ms per message")
    lines.append(f"stream intact: without {'yes' if without.intact else 'NO'}, "
                 f"with {'yes' if with_layer.intact else 'NO'}; messages relayed by the proxy: "
                 f"{with_layer.relayed if with_layer.relayed is not None else 'n/a'}")
    return lines


# -- the live part (root) --------------------------------------------------------------


def _abort(sock: socket.socket) -> None:
    """Close with a RST: no FIN to drain through a busy path, no TIME_WAIT left behind."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def connect(cluster) -> tuple[socket.socket, socket.socket]:
    """A TCP connection from n1 to n2's PEER_PORT: (n1's end, n2's end), Nagle off, each
    blocking call bounded by POLL_S."""
    from tests.live.netns_helpers import in_netns

    with in_netns(cluster.namespace("n2")):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((cluster.node_address("n2"), PEER_PORT))
        listener.listen(1)
        listener.settimeout(10)
        with in_netns(cluster.namespace("n1")):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            client.settimeout(10)
            client.connect((cluster.node_address("n2"), PEER_PORT))
            server, _ = listener.accept()
        except BaseException:
            _abort(client)
            raise
    finally:
        listener.close()
    for end in (client, server):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end.settimeout(POLL_S)
    return client, server


def throughput(cluster, seconds: float) -> tuple[float, bool]:
    """n1 writes a PingStream to n2 for `seconds`: (messages n2 read in that time per
    second, whether what it read was the stream)."""
    stream = PingStream()
    client, server = connect(cluster)
    messages = 0
    stop = threading.Event()
    start = time.perf_counter()
    deadline = start + seconds

    def receive() -> None:
        nonlocal messages
        while not stop.is_set():
            try:
                chunk = server.recv(READ_SIZE)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if time.perf_counter() > deadline:
                return
            if not chunk:  # the connection ended (or was reset) before its time: broken
                stream.intact = False
                return
            messages += chunk.count(b"\n")
            stream.received(chunk)

    receiver = threading.Thread(target=receive, name="receiver", daemon=True)
    receiver.start()
    try:
        data, at = memoryview(stream.data), 0
        while time.perf_counter() < deadline:
            try:
                at = (at + client.send(data[at:])) % len(data)
            except TimeoutError:
                continue  # TCP's window is full: the path is the limit
    finally:
        stop.set()
        receiver.join(5)
        _abort(client)
        _abort(server)
    return messages / seconds, stream.intact


def round_trips(cluster, count: int, warmup: int) -> list[float]:
    """`warmup` then `count` ping-pongs n1 -> n2 -> n1 on one connection, one at a time:
    the `count` round trips, ms. AssertionError on a wrong answer."""
    client, server = connect(cluster)
    stop = threading.Event()

    def echo() -> None:
        pending = b""
        while not stop.is_set():
            try:
                chunk = server.recv(READ_SIZE)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    server.sendall(b"pong" + line[4:] + b"\n")
            except TimeoutError:
                continue
            except OSError:
                return  # the client's end was closed: the measurement is over

    echoer = threading.Thread(target=echo, name="echo", daemon=True)
    echoer.start()
    rtts: list[float] = []
    try:
        pending = b""
        for seq in range(warmup + count):
            t0 = time.perf_counter_ns()
            client.sendall(b"ping %d\n" % seq)
            while b"\n" not in pending:
                try:
                    chunk = client.recv(READ_SIZE)
                except TimeoutError:
                    if time.perf_counter_ns() - t0 > 10e9:
                        raise AssertionError(f"no answer to ping {seq} in 10 s") from None
                    continue
                if not chunk:
                    raise AssertionError(f"n2 closed the connection at ping {seq}")
                pending += chunk
            elapsed = time.perf_counter_ns() - t0
            line, pending = pending.split(b"\n", 1)
            assert line == b"pong %d" % seq, f"ping {seq} answered {line!r}"
            if seq >= warmup:
                rtts.append(elapsed / 1e6)
    finally:
        stop.set()
        _abort(client)
        echoer.join(5)
        _abort(server)
    return rtts


def relayed(mediator) -> int:
    """How many messages the mediator's proxy has relayed (cut and decided) so far."""
    return mediator.ok("GET", "/metrics")["message_layer"]["proxy"].get("messages", 0)


def measure(cluster, mediator, args: argparse.Namespace, layer: bool) -> Measurement:
    before = relayed(mediator) if layer else 0
    rate, intact = throughput(cluster, args.seconds)
    print(f"  throughput {rate:,.0f} messages/s, stream {'intact' if intact else 'NOT INTACT'}", flush=True)
    rtts = round_trips(cluster, args.round_trips, args.warmup)
    print(f"  round trips p50 {percentile(rtts, 0.5, 3)} ms, p99 {percentile(rtts, 0.99, 3)} ms", flush=True)
    if not layer:
        return Measurement(rate, intact, rtts)
    count = relayed(mediator) - before
    if count == 0:
        raise SystemExit("the proxy relayed no message: the diversion did not take, the numbers are the plain path's")
    return Measurement(rate, intact, rtts, count)


def run(args: argparse.Namespace) -> list[str]:
    from mallory.cluster.netns import NetnsCluster
    from tests.live.netns_helpers import MediatorProcess

    cluster = NetnsCluster.up(f"bl-{uuid.uuid4().hex[:6]}", 2)
    try:
        files = write_layer_files(cluster.data_dir("gw"))
        print(f"run {cluster.run}: n1 -> n2 port {PEER_PORT}, {args.seconds:g} s of throughput and "
              f"{args.warmup} + {args.round_trips} round trips per mediator", flush=True)
        results = []
        for layer in (False, True):
            print(f"mediator {'with the message layer' if layer else 'without the message layer'}:", flush=True)
            mediator = MediatorProcess(cluster, args=files.mediator_args() if layer else ()).start()
            try:
                results.append(measure(cluster, mediator, args, layer))
                if layer:
                    scenario = mediator.ok("GET", "/scenario")
                    print(f"  scenario: {scenario['events']} events stepped, run ended: {scenario['ended']}")
            finally:
                mediator.kill(signal.SIGTERM)
        return report(*results)
    finally:
        cluster.down()


def main() -> int:
    args = parse_args()
    if os.geteuid() != 0:
        print("bench_message_layer: needs root (network namespaces, iptables, TPROXY)", file=sys.stderr)
        return 1
    # SIGTERM unwinds like Ctrl-C, through every finally: mediator stopped, run removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for line in run(args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
