"""Helpers for the mediator's namespace tests: sockets made inside a node's namespace,
UDP traffic between nodes, and the mediator process in the gateway of a netns run."""

from __future__ import annotations

import ctypes
import http.client
import socket
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from itertools import permutations
from pathlib import Path

import orjson

from mallory import paths
from mallory.cluster.backend import NodeProcess
from mallory.cluster.netns import NetnsCluster

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
REPO = paths.HOME
TOKEN = "test-token"


@contextmanager
def in_netns(namespace: str):
    """Run the block in `namespace` (this thread only): sockets made here stay in it."""
    with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{namespace}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {namespace}")
        try:
            yield
        finally:
            if _libc.setns(own.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


def udp_socket(cluster: NetnsCluster, node: str, port: int = 0) -> socket.socket:
    with in_netns(cluster.namespace(node)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((cluster.node_address(node), port))
    return s


def check_links(cluster, cut: set[tuple[str, str]]) -> None:
    """Every directed link between the cluster's nodes carries 10 of 10 datagrams, except
    exactly those in `cut`, which carry none."""
    want = {link: 0 if link in cut else 10 for link in permutations(cluster.nodes, 2)}
    assert count_delivered(cluster, list(want), n=10, expect=want) == want


def as_links(report) -> set[tuple[str, str]]:
    """A fault report's links ("n1->n2") as (src, dst) pairs."""
    return {tuple(link.split("->")) for link in report.links}  # type: ignore[misc]


def count_delivered(cluster: NetnsCluster, links: list[tuple[str, str]], n: int = 20, expect: dict | None = None,
                    timeout: float = 10.0, grace: float = 0.3) -> dict:
    """Send n datagrams over each link; how many arrived, per link. Receives until each link
    has what `expect` says it should get (default: its n), or for `timeout`, then for `grace`
    more, to count what should not come (a cut link's datagrams, extra copies): a busy
    machine makes it wait longer, never count less."""
    want = expect if expect is not None else {link: n for link in links}
    receivers = {node: udp_socket(cluster, node) for node in cluster.nodes}
    senders = {node: udp_socket(cluster, node) for node in cluster.nodes}
    try:
        for src, dst in links:
            for i in range(n):
                senders[src].sendto(f"{src}>{dst}:{i}".encode(), receivers[dst].getsockname())
        got = {link: 0 for link in links}
        for r in receivers.values():
            r.setblocking(False)
        end, complete = time.monotonic() + timeout, False
        while time.monotonic() < end:
            if not complete and all(got[link] >= want.get(link, 0) for link in links):
                complete, end = True, time.monotonic() + grace
            idle = True
            for r in receivers.values():
                try:
                    data = r.recv(100)
                except BlockingIOError:
                    continue
                idle = False
                src, rest = data.decode().split(">")
                got[(src, rest.split(":")[0])] += 1
            if idle:
                time.sleep(0.002)
        return got
    finally:
        for s in [*receivers.values(), *senders.values()]:
            s.close()


def udp_rtts(cluster: NetnsCluster, src: str, dst: str, n: int = 15) -> list[float]:
    """Round-trip times (ms) of n UDP ping-pongs src -> dst -> src (echo in a thread)."""
    import threading

    server = udp_socket(cluster, dst)
    client = udp_socket(cluster, src)
    server.settimeout(0.02)  # the echo thread checks `stop` this often
    client.settimeout(3)
    stop = threading.Event()

    def echo():
        while not stop.is_set():
            try:
                data, peer = server.recvfrom(100)
            except TimeoutError:
                continue
            except OSError:
                return
            server.sendto(data, peer)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    rtts = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            client.sendto(str(i).encode(), server.getsockname())
            while client.recv(100) != str(i).encode():
                pass
            rtts.append((time.perf_counter() - t0) * 1000)
    finally:
        stop.set()
        t.join(1)
        server.close()
        client.close()
    return rtts


class MediatorProcess:
    """`mallory mediator --run RUN [ARGS]` in the run's gateway namespace, driven over its
    API; `args` are more of its arguments (`--scenario FILE --messages FILE`: the message
    layer)."""

    def __init__(self, cluster: NetnsCluster, record: Path | None = None, args: Sequence[str] = ()) -> None:
        self.cluster = cluster
        self.args = list(args)
        self.host = cluster.layout.gateway_control_address
        self.port = 7100
        self.ready = cluster.data_dir("gw") / "mediator.ready"
        self.record = record
        self.proc: NodeProcess | None = None

    def start(self, timeout: float = 15.0) -> "MediatorProcess":
        self.ready.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "mallory.cli", "mediator", "--run", self.cluster.run,
                "--ready-file", str(self.ready)]
        if self.record is not None:
            argv += ["--record", str(self.record)]
        argv += self.args
        self.proc = self.cluster.spawn("gw", argv, name="mediator", cwd=REPO, env={"MALLORY_TOKEN": TOKEN})
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if not self.cluster.is_running(self.proc) or time.monotonic() > deadline:
                raise AssertionError(f"mediator did not start: {self.proc.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def call(self, method: str, path: str, body: object = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        conn.request(method, path, body=orjson.dumps(body) if body is not None else None,
                     headers={"X-Mallory-Token": TOKEN})
        resp = conn.getresponse()
        out = resp.status, orjson.loads(resp.read())
        conn.close()
        return out

    def ok(self, method: str, path: str, body: object = None) -> dict:
        status, out = self.call(method, path, body)
        assert status == 200, out
        return out

    def kill(self, signum: int) -> None:
        assert self.proc is not None
        self.cluster.signal(self.proc, signum)
        assert self.cluster.wait(self.proc, 10) is not None
