"""Scaffolding shared by the live-cluster tests (root, network namespaces): a netns cluster
taken down whatever happens, the mediator in its gateway, an observer in every node, the
recording's node events, a register run checked linearizable, and clock faults drawn until
their effect is measurable."""

from __future__ import annotations

import random
import signal
import socket
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from mallory.cluster.loopback import LoopbackBackend
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run
from mallory.harness.workload import RegisterWorkload
from mallory.history.ops import read_history
from mallory.observer.ring import create_ring
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.models import CasRegister
from mallory.polling import wait_until
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Event

TOKEN = "example-sut-token"
API_PORT = 7100


@contextmanager
def netns_cluster(prefix: str, root: Path, nodes: int = 3) -> Iterator[Any]:
    """A fresh NetnsCluster named `<prefix>-<random>` with its data under `root`; skips the
    test without root or iproute2, and always takes the cluster down."""
    from mallory.cluster.netns import NetnsCluster

    cluster = NetnsCluster.up(f"{prefix}-{uuid.uuid4().hex[:6]}", nodes, data_root=root)
    try:
        yield cluster
    finally:
        cluster.down()


def start_mediator(cluster, record_dir: Path | None = None):
    """`mallory mediator` in the gateway (firewall on FORWARD); its process and a client."""
    from mallory.mediator.client import MediatorClient

    ready = cluster.data_dir("gw") / "ready"
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "mallory.cli", "mediator", "--run", cluster.run, "--ready-file", str(ready)]
    if record_dir is not None:
        argv += ["--record", str(record_dir)]
    proc = cluster.spawn("gw", argv, name="mediator", env={"MALLORY_TOKEN": TOKEN})
    wait_until(ready.exists, 20, "the mediator")
    return proc, MediatorClient(cluster.layout.gateway_control_address, API_PORT, TOKEN)


def start_observers(cluster, log_watch: Callable[[str], Any] | None = None) -> dict:
    """`mallory observe` in every node (packets + the node's shm ring, which it creates
    before the SUT starts), batching to the mediator in the gateway; with `log_watch`, each
    observer also turns its node's log lines into events (the adapter's patterns, as the
    campaign hands them)."""
    from mallory.observer.log_events import write_watch_file

    procs = {}
    for node in cluster.nodes:
        argv = [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run]
        if log_watch is not None:
            watch = cluster.data_dir("gw") / f"log-events-{node}.json"
            write_watch_file(str(watch), log_watch(node))
            argv += ["--log-events", str(watch)]
        procs[node] = cluster.spawn(node, argv, name="observer")
    return procs


@dataclass(frozen=True)
class TcpSocket:
    state: str  # as ss names it: ESTAB, LISTEN, FIN-WAIT-1, ...
    recv_q: int
    send_q: int  # unsent or unacknowledged bytes; for a listener, its backlog
    local: str  # address:port
    peer: str


def tcp_sockets(cluster, node: str) -> list[TcpSocket]:
    """Every TCP socket in `node`'s namespace, orphaned ones (closed by a process that is
    gone, still sending) included: `ss -tan`."""
    out = cluster.exec(node, ["ss", "-tanH"]).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return [TcpSocket(r[0], int(r[1]), int(r[2]), r[3], r[4]) for r in rows]


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (all bound at once, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop(cluster, procs: list) -> None:
    """SIGTERM every process, then wait for each (10 s)."""
    for proc in procs:
        cluster.signal(proc, signal.SIGTERM)
    for proc in procs:
        cluster.wait(proc, 10)


@contextmanager
def observed(cluster, record_dir: Path, log_watch: Callable[[str], Any] | None = None, timeout: float = 30) -> Iterator[Any]:
    """The mediator recording to `record_dir` and an observer per node, once every observer
    has delivered a batch (each has created its node's ring); the mediator's client. The
    observers, then the mediator, are stopped on the way out."""
    mediator_proc, mediator = start_mediator(cluster, record_dir)
    observers = start_observers(cluster, log_watch)
    try:
        wait_until(
            lambda: all(mediator.metrics()["ingest"]["nodes"].get(n, {}).get("batches", 0) > 0 for n in cluster.nodes),
            timeout,
            "batches from every observer (each has created its node's ring)",
        )
        yield mediator
    finally:
        stop(cluster, list(observers.values()))
        stop(cluster, [mediator_proc])


def node_events(record_dir: Path, nodes: list[str]) -> list[Event]:
    """The events of `nodes` in the mediator's recording (the gateway's own left out)."""
    with open(record_dir / "events.jsonl", "rb") as f:
        return [e for r in read_records(f) if isinstance(r, Batch) for e in r.events if e.node in nodes]


def checked_register_run(sut, out: Path, seconds: float, initial: int | None, rate: int) -> int:
    """The register workload on `sut` for `seconds`, its history checked linearizable from
    the value key 0 starts with; how many operations completed ok."""
    summary = record_run(sut, RegisterWorkload(), RunConfig(concurrency=3, time_limit=seconds, rate=rate), out)
    _, history = read_history(out / "history.edn")
    result = check_linearizable(history, CasRegister(initial))
    assert result.valid is True, result.explanation
    return summary.completions["ok"]


@contextmanager
def loopback_with_rings(nodes: int = 3, capacity: int = 1 << 16, root: Path | None = None) -> Iterator[LoopbackBackend]:
    """A loopback cluster whose nodes have rings, as an observer would create them; destroying
    the backend removes them (and its root, unless `root` was given: then the logs stay)."""
    backend = LoopbackBackend(nodes, root)
    try:
        for node in backend.nodes:
            create_ring(backend.shm_name(node), capacity, exist_ok=True)
        yield backend
    finally:
        backend.destroy()


def enact_until(nemesis, label: str, wanted: Callable[[Any], bool], tries: int = 40) -> Any:
    """Enact `label` with successive seeds until its random parameters make the effect
    measurable (`wanted` of its report); the other attempts are healed."""
    for seed in range(tries):
        report = nemesis.enact(label, random.Random(seed))
        if wanted(report):
            return report
        nemesis.heal(report)
    raise AssertionError(f"no seed in {tries} gave a measurable {label}")


def clock_bumped(report) -> bool:
    """A clock:bump a reader tells from noise: every node it moved, by a second or more."""
    return min(abs(d) for d in report.params["delta_s"].values()) >= 1.0


def clock_strobing(report) -> bool:
    """A clock:strobe a reader sees flip: by two seconds or more, at least every 0.3 s."""
    return abs(report.params["delta_s"]) >= 2.0 and report.params["period_s"] <= 0.3


def enact_measurably(nemesis, label: str) -> tuple[Any, Any]:
    """Enact `label` so that a reader can tell it took: clock:bump and clock:strobe retried
    until measurable; clock:reset after some clocks were bumped and some set strobing (a reset
    that stopped no strobe would see its clocks flip back); anything else once, seed 11.
    The report, and the strobe's report for a reset (None otherwise)."""
    if label == "clock:bump":
        return enact_until(nemesis, label, clock_bumped), None
    if label == "clock:strobe":
        return enact_until(nemesis, label, clock_strobing), None
    strobe = None
    if label == "clock:reset":
        enact_until(nemesis, "clock:bump", clock_bumped)
        strobe = enact_until(nemesis, "clock:strobe", clock_strobing)
    return nemesis.enact(label, random.Random(11)), strobe
