"""raft-kv (suts/raft): the project's key-value server on Canonical Raft, as an SUT with
membership changes.

The process side is the shipped TOML spec (`suts/raft/raft.toml`); this adapter adds what a
spec cannot say, through the server's admin commands on its client port:

* `primaries()`: the nodes whose `STATUS` says `state=leader`;
* `promote(node)`: leadership transfer to `node` (`TRANSFER <raft address>` on the leader);
* `remove_member(node)`: `REMOVE` on the leader (after moving leadership away if `node`
  leads, to whichever other node takes it), then the node is stopped and its data wiped: a
  removed server that kept its log would come back with a higher term and depose the leader;
* `add_member(node)`: the node starts empty with `--join` (no bootstrap) and a fresh raft id,
  as an operator would give a new server (late messages of its removed incarnation must not
  be taken for its own), then the leader `ADD`s it under that id (as a spare) and `ASSIGN`s
  it the voter role (libraft catches it up first);
* `applied_digests()`: what each node applied, from its `DIGEST` hash chain;
* clients: the spec's line client for the register workload, `RaftTxnClient` (one atomic
  `TXN` line) for list-append and rw-register.

A server's raft address is `<node address>:<peer port>`; an initial voter derives its id
from it, a node added back after a removal runs with the id the adapter gave it (`--id`).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable, Sequence

from mallory import paths
from mallory.cluster.backend import ClusterBackend
from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, Membership, Promotable, ReportsApplied
from mallory.harness.client import Client
from mallory.harness.line_client import LineClient, request_line
from mallory.harness.spec import SutSpec, load_spec
from mallory.harness.spec_adapter import SpecAdapter
from mallory.harness.sut_make import make_with_mallory_cc
from mallory.harness.workload import Workload
from mallory.suts.raft_kv.client import RaftTxnClient

SUT_DIR = paths.SUTS / "raft"
DEFAULT_SPEC = SUT_DIR / "raft.toml"
#: how long a membership change or transfer may take (libraft promotes a spare after
#: catch-up rounds; an election after a transfer takes an election timeout or two)
CHANGE_TIMEOUT = 20.0
#: how long a fault (remove, promote) waits for a leader: under other faults there may be
#: none, and a fault step should be refused quickly rather than stall the schedule
FAULT_LEADER_TIMEOUT = 5.0


def build(build_dir: Path | None = None) -> Path:
    """Build suts/raft with mallory-cc; the binary's path. make is a no-op when the binary
    is up to date."""
    make_with_mallory_cc(SUT_DIR, build_dir, "raft-kv", hint="needs libraft-dev, libuv1-dev: .ci/apt/raft.txt")
    return (build_dir or SUT_DIR / "build") / "raft-kv"


def parse_status(reply: str) -> dict[str, str]:
    """`OK state=leader term=3 ...` -> {"state": "leader", "term": "3", ...}; {} otherwise."""
    if not reply.startswith("OK "):
        return {}
    return dict(field.split("=", 1) for field in reply[3:].split() if "=" in field)


def parse_members(reply: str) -> dict[str, str]:
    """`OK <address>/<role> ...` (MEMBERS) -> {address: role}."""
    return dict(item.rsplit("/", 1) for item in reply[2:].split())


def fresh_raft_id(address: str, incarnation: int) -> int:
    """The raft id of the `incarnation`-th server added back at `address` (1, 2, ...): a
    positive 63-bit number of its own, the same in a replay of the schedule."""
    digest = hashlib.blake2b(f"{address}#{incarnation}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1 or 1


class RaftKvProtocolAdapter(SpecAdapter, ReportsApplied):
    """A spec adapter whose line-protocol server also speaks raft-kv's TXN and DIGEST lines
    (raft-kv, the pysyncobj service): the spec's line client for registers, the TXN client
    (mallory/suts/raft_kv/client.py) for list-append and rw-register, and what each node
    applied from its DIGEST hash chain."""

    #: the workloads its clients run
    WORKLOADS = (*LineClient.WORKLOADS, *RaftTxnClient.WORKLOADS)

    def client(self, node: str, workload: Workload) -> Client:
        if workload.name == "register":
            return super().client(node, workload)
        timeout = self.spec.client.timeout if self.spec.client else 2.0
        return RaftTxnClient(self.backend.client_address(node), self.spec.ports["client"], workload.name, timeout=timeout)

    def ask(self, node: str, line: str, timeout: float = 2.0) -> str:
        """One request line to the node's client port, its reply ('' when none)."""
        return request_line(self.backend.client_address(node), self.spec.ports["client"], line, timeout)

    def applied_digests(self) -> dict[str, dict[int, str]]:
        """`DIGEST` on every running node (`OK applied=<i> chain=<hex>`), then `DIGEST <j>` on
        the nodes ahead, j the lowest index any of them applied up to: each node's chain at
        its own last index and at j (when it still keeps j)."""
        latest: dict[str, tuple[int, str]] = {}
        for node in self.backend.nodes:
            fields = parse_status(self.ask(node, "DIGEST", timeout=1.0)) if self.is_running(node) else {}
            applied = int(fields["applied"]) if fields.get("applied", "").isdigit() else 0
            if applied > 0 and "chain" in fields:
                latest[node] = (applied, fields["chain"])
        if not latest:
            return {}
        common = min(index for index, _ in latest.values())
        out: dict[str, dict[int, str]] = {}
        for node, (index, chain) in latest.items():
            out[node] = {index: chain}
            if index != common:
                kept = parse_status(self.ask(node, f"DIGEST {common}", timeout=1.0))
                if "chain" in kept:
                    out[node][common] = kept["chain"]
        return out


class RaftKvAdapter(RaftKvProtocolAdapter, HasPrimaries, Promotable, Membership):
    def __init__(self, spec: SutSpec, backend: ClusterBackend) -> None:
        super().__init__(spec, backend)
        if "peer" not in spec.ports:
            raise MalloryError(f"{spec.source}: raft-kv needs a `peer` port in [ports] (its raft address)")
        #: nodes that start empty and wait to be added (a removed node coming back)
        self._joining: set[str] = set()
        #: node -> the raft id it was given when it was last added back (absent: derived)
        self._ids: dict[str, int] = {}
        #: node -> how many times it was removed since the cluster was set up
        self._incarnations: dict[str, int] = {}
        self.change_timeout = CHANGE_TIMEOUT
        self.fault_leader_timeout = FAULT_LEADER_TIMEOUT

    @classmethod
    def default(cls, backend: ClusterBackend) -> "RaftKvAdapter":
        """The shipped spec and binary (built on first use)."""
        spec = load_spec(DEFAULT_SPEC)
        if not Path(spec.command[0]).exists():
            build()
        return cls(spec, backend)

    # -- addresses and requests -------------------------------------------------------------

    def raft_address(self, node: str) -> str:
        return f"{self.backend.node_address(node)}:{self.spec.ports['peer']}"

    def status(self, node: str) -> dict[str, str]:
        """The node's STATUS fields ({} when it does not answer)."""
        return parse_status(self.ask(node, "STATUS", timeout=1.0)) if self.is_running(node) else {}

    def leader(self, timeout: float | None = None) -> str:
        """The node that is leader, once exactly one running node says so."""
        timeout = self.change_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            found = self.primaries()
            if len(found) == 1:
                return found[0]
            if time.monotonic() >= deadline:
                raise MalloryError(f"raft-kv: no single leader after {timeout:g} s (leaders: {found or 'none'})")
            time.sleep(0.1)

    def _on_leader(self, line: str, done: Callable[[], bool] | None = None) -> str:
        """Send an admin command to the leader until it answers OK, following leadership
        changes; `done` (checked before every attempt) says the change already took effect
        (an earlier attempt answered UNKNOWN but committed). The last reply."""
        timeout = self.change_timeout
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if done is not None and done():
                return "OK"
            leader = self.leader(max(0.1, deadline - time.monotonic()))
            last = self.ask(leader, line, timeout=max(0.5, deadline - time.monotonic()))
            if last.startswith("OK"):
                return last
            time.sleep(0.2)  # not leader any more, a change in flight (busy): again
        raise MalloryError(f"raft-kv: {line!r} not accepted in {timeout:g} s (last reply {last!r})")

    def members(self) -> dict[str, str]:
        """raft address -> role, as the leader's configuration has it."""
        return parse_members(self._on_leader("MEMBERS"))

    # -- process side -----------------------------------------------------------------------

    def command(self, node: str) -> Sequence[str]:
        argv = list(super().command(node))
        if node in self._ids:
            argv += ["--id", str(self._ids[node])]
        return argv + ["--join"] if node in self._joining else argv

    def probe(self, node: str) -> bool:
        """Ready: it leads, or follows a known leader (now, not once since it started: a
        server libraft gave up on exits, but one cut off from the leader is not ready)."""
        status = self.status(node)
        return status.get("state") == "leader" or (status.get("state") == "follower" and status.get("leader", "-") != "-")

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        """A node still waiting to join (a heal that found no quorum then, say under kill:all,
        whose heal runs later in a reset) is added first: it serves only once it is a member."""
        if node in self._joining and self.is_running(node):
            self.add_member(node)
        super().wait_ready(node, timeout)

    def teardown(self, node: str) -> None:
        """Also forgets the node's removals: the next start bootstraps it with its derived id."""
        super().teardown(node)
        self._joining.discard(node)
        self._ids.pop(node, None)
        self._incarnations.pop(node, None)

    # -- roles and membership ---------------------------------------------------------------

    def primaries(self) -> list[str]:
        return [n for n in self.backend.nodes if self.status(n).get("state") == "leader"]

    def promote(self, node: str) -> None:
        """Transfer leadership to `node`, and wait (a while) until it says it leads. Raises
        only when no transfer can be asked for (no leader, `node` not a voter); a transfer
        that does not take (libraft gives up after an election timeout, say to a node cut
        off or paused) is for the caller to see in `primaries()`, as the membership fault's
        evidence does. The TRANSFER reply comes once libraft ended the transfer, so what
        follows is only the new leader's own word: waited for up to `fault_leader_timeout`."""
        if self.leader(self.fault_leader_timeout) == node:
            return
        if self.members().get(self.raft_address(node)) != "voter":
            raise MalloryError(f"raft-kv: cannot make {node} leader: it is not a voter")
        self._on_leader(f"TRANSFER {self.raft_address(node)}")
        deadline = time.monotonic() + self.fault_leader_timeout
        while self.status(node).get("state") != "leader" and time.monotonic() < deadline:
            time.sleep(0.1)

    def remove_member(self, node: str) -> None:
        """Under a partition the first other node may be cut off from the leader: leadership
        is offered to each other running voter in turn until it moves."""
        if self.leader(self.fault_leader_timeout) == node:
            others = [n for n in self.backend.nodes if n != node and self.status(n)]
            if not others:
                raise MalloryError(f"raft-kv: cannot remove {node}: no other running node to lead")
            for other in others:
                try:
                    self.promote(other)
                except MalloryError:
                    continue  # not a voter, or no leader to ask right now: the next one
                if self.leader(self.fault_leader_timeout) != node:
                    break
            else:
                raise MalloryError(f"raft-kv: cannot remove {node}: leadership did not move away from it")
        address = self.raft_address(node)
        try:
            self._on_leader(f"REMOVE {address}", done=lambda: address not in self.members())
        except MalloryError:
            # Sent, then no leader left to confirm it: the change may have committed all the
            # same. A node left out of the configuration must be wiped like any removed one,
            # or it restarts as a voter of a configuration without it and campaigns forever.
            if not self._left_configuration(address):
                raise
        self.stop(node)
        super().teardown(node)  # wipe: it comes back only as a fresh server, with a fresh id
        self._joining.add(node)
        self._incarnations[node] = self._incarnations.get(node, 0) + 1
        self._ids[node] = fresh_raft_id(address, self._incarnations[node])

    def _left_configuration(self, address: str) -> bool:
        """Whether a majority of the nodes hold a configuration without `address` (each node's
        own MEMBERS, leader or not; a node waiting to join has none to count): a change a
        majority stored is committed, or will be."""
        asked = [n for n in self.backend.nodes if n not in self._joining and self.is_running(n)]
        replies = [self.ask(n, "MEMBERS", timeout=1.0) for n in asked]
        without = sum(1 for reply in replies if reply.startswith("OK") and address not in parse_members(reply))
        return without > len(self.backend.nodes) // 2

    def add_member(self, node: str) -> None:
        """Start `node` empty (when it was removed) and make it a voter; returns once the
        change is committed."""
        address = self.raft_address(node)
        if node in self._joining and not self.is_running(node):
            super().teardown(node)
            self.start(node)
        self._on_leader(f"ADD {address} {self._ids[node]}" if node in self._ids else f"ADD {address}",
                        done=lambda: address in self.members())
        self._on_leader(f"ASSIGN {address} voter", done=lambda: self.members().get(address) == "voter")
        self._joining.discard(node)
