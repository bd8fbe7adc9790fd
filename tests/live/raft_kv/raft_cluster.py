"""Helpers for raft-kv's tests: build it with mallory-cc, make its adapter from the shipped
spec (pointed at the test's binary and ports), find its leader, and talk to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mallory.harness.spec import load_spec
from mallory.polling import wait_until
from mallory.suts.raft_kv.adapter import (
    DEFAULT_SPEC,
    SUT_DIR,
    RaftKvAdapter,
    parse_status,
)

SOURCE = SUT_DIR / "raft_kv.c"
#: every annotation in raft_kv.c
LABELS = {
    "apply", "apply-txn", "cas-mismatch", "snapshot", "restore", "state-change", "became-leader", "became-candidate",
    "became-follower", "leader-change", "leader-lost", "membership-change", "snapshot-index-advanced",
    "not-leader-reply", "apply-failed", "unavailable-exit", "client-command", "admin-command", "client-request", "shutdown",
}  # fmt: skip


def adapter(backend, binary: Path, *flags: str, ports: tuple[int, int] = (7000, 7001)) -> RaftKvAdapter:
    """The shipped spec with `binary`, the extra command-line `flags` (a later flag wins
    over the spec's) and (client, peer) `ports`."""
    spec = load_spec(DEFAULT_SPEC)
    spec = dataclasses.replace(
        spec, command=(str(binary), *spec.command[1:], *flags), ports={"client": ports[0], "peer": ports[1]}
    )
    return RaftKvAdapter(spec, backend)


def ask(sut: RaftKvAdapter, node: str, line: str, timeout: float = 2.0) -> str:
    return sut.ask(node, line, timeout)


def wait_leader(sut: RaftKvAdapter, timeout: float = 15.0, among: list[str] | None = None) -> str:
    """The one running node (of `among`) that says it leads and can commit a read."""

    def one() -> str | None:
        leaders = [n for n in sut.primaries() if among is None or n in among]
        if len(leaders) == 1 and ask(sut, leaders[0], "GET probe", timeout=1.0).startswith("OK"):
            return leaders[0]
        return None

    return wait_until(one, timeout, "one leader that commits")  # type: ignore[return-value]


def status(sut: RaftKvAdapter, node: str) -> dict[str, str]:
    return parse_status(ask(sut, node, "STATUS"))


def log_text(sut: RaftKvAdapter, node: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sut.log_paths(node) if p.exists())


def start_observers(cluster, sut: RaftKvAdapter) -> dict:
    """`mallory observe` in every node (packets, the node's shm ring, and the spec's
    [[log_events]] over the node's log, resolved by the adapter as the campaign does)."""
    import sys

    from mallory.observer.log_events import write_watch_file

    procs = {}
    for node in cluster.nodes:
        watch = cluster.data_dir("gw") / f"log-events-{node}.json"
        write_watch_file(str(watch), sut.log_watch(node))
        argv = [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run, "--log-events", str(watch)]
        procs[node] = cluster.spawn(node, argv, name="observer")
    return procs


def log_event_names(sut: RaftKvAdapter, text: str) -> list[str]:
    """The LOG event names the spec's [[log_events]] give the lines of `text`."""
    from mallory.observer.log_events import LineMatcher

    return LineMatcher([(p.pattern, p.name) for p in sut.log_events]).names(text)
