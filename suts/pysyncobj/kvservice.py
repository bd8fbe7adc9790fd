"""A replicated key-value service on pysyncobj (Raft in Python): one process per node.

    kvservice.py --listen IP --client-port P --peer-port Q --peers IP:Q,... --data DIR
                 [--election-ms 400] [--heartbeat-ms 50] [--op-timeout 1.0]

Clients speak the example SUT's line protocol (mallory/harness/line_client.py) on the
client port, one request line, one reply line:

    GET k | PUT k v | CAS k old new | APPEND k v | STATUS
    -> OK [value|nil] | FAIL mismatch | ERR <why> | UNKNOWN <why>
    TXN r:k a:k:v w:k:v ...
    -> OK <per micro-op: what a read saw (nil: nothing), _ for a write or append> | ERR | UNKNOWN
    DIGEST -> OK applied=<raft index of the last command applied> chain=<hex>
    DIGEST <index> -> OK index=<index> chain=<hex> | ERR not-kept

Every operation, reads included, is a pysyncobj `@replicated` command: it goes through the
Raft log and is answered once applied, so any node serves every operation (a follower
forwards it to the leader). `ERR` means the command was certainly not applied (no leader,
queue full, not leader, discarded); `UNKNOWN` means it may still be (the op timed out or
the leader changed while a follower waited for its answer). An APPENDed key holds a list,
which GET answers as `OK v1,v2,...`. A TXN (raft-kv's transaction line, so the list-append
and rw-register workloads use mallory/suts/raft_kv/client.py) is one log entry. STATUS answers `OK role=<r> leader=<host|-> term=<n>`.

DIGEST is raft-kv's too: every applied command extends a hash chain (BLAKE2b over the
previous value, the command's raft index and the command), kept for the last CHAIN_KEPT
commands and carried in pysyncobj's dumps with the data, so replicas can be compared at a
common index (mallory/oracles/replicas.py).

The Raft journal (`raft.journal`) and full dumps (`raft.dump`) are in the data directory,
so a killed node restarts with its log. Every leader change is a line on stdout
(`leader is 10.101.1.2:7301 (self follower, term 3)`), the readiness pattern of the spec.

`# INSTRUMENT_*` comments mark the service's own events; run it under
`python -m mallory.pyinstrument --annotated suts/pysyncobj --trace-file suts/pysyncobj/trace.txt`
(the spec does) to have them and pysyncobj's traced internals in the node's ring.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socketserver
import sys
import threading
from collections.abc import Callable
from typing import Any

from pysyncobj import (
    _RAFT_STATE,
    FAIL_REASON,
    SyncObj,
    SyncObjConf,
    SyncObjException,
    replicated,
)

#: Failures after which the command was certainly not applied.
_NOT_APPLIED = {
    FAIL_REASON.QUEUE_FULL: "queue-full",
    FAIL_REASON.MISSING_LEADER: "no-leader",
    FAIL_REASON.DISCARDED: "discarded",
    FAIL_REASON.NOT_LEADER: "not-leader",
    FAIL_REASON.REQUEST_DENIED: "denied",
}
#: Failures after which it may still be applied (besides pysyncobj's 'Timeout').
_MAYBE_APPLIED = {FAIL_REASON.LEADER_CHANGED: "leader-changed", FAIL_REASON.UNKNOWN_OUTCOME: "unknown-outcome"}
_ROLES = {_RAFT_STATE.FOLLOWER: "follower", _RAFT_STATE.CANDIDATE: "candidate", _RAFT_STATE.LEADER: "leader"}
#: how many of the last applied commands' chain values a node keeps (DIGEST <index>)
CHAIN_KEPT = 1024


class KVStore(SyncObj):
    """The replicated state: key -> int or str (registers) or list (APPEND)."""

    def __init__(self, me: str, peers: list[str], conf: SyncObjConf) -> None:
        super().__init__(me, peers, conf)
        # Set after SyncObj's own attributes, so pysyncobj's dumps carry them.
        self._data: dict[str, object] = {}
        #: (raft index of the last command applied, the chain's value after it), one
        #: attribute so a client thread never reads the index of one and the value of another
        self._chain: tuple[int, str] = (0, "0" * 16)
        #: raft index -> the chain's value after it, for the last CHAIN_KEPT commands
        self._chain_kept: dict[int, str] = {}

    def _chain_command(self, *command: object) -> None:
        """Extend the chain with the command being applied. Called first by every replicated
        method, as it is applied: pysyncobj counts the entry applied only afterwards, so its
        raft index is the one after `raftLastApplied`."""
        index = self.raftLastApplied + 1
        value = hashlib.blake2b(f"{self._chain[1]}|{index}|{command!r}".encode(), digest_size=8).hexdigest()
        self._chain = (index, value)
        self._chain_kept[index] = value
        if len(self._chain_kept) > CHAIN_KEPT:
            del self._chain_kept[next(iter(self._chain_kept))]

    # INSTRUMENT_FUNC apply-put
    @replicated
    def put(self, key: str, value: object) -> bool:
        self._chain_command("put", key, value)
        self._data[key] = value
        return True

    # INSTRUMENT_FUNC apply-cas
    @replicated
    def cas(self, key: str, old: object, new: object) -> bool:
        self._chain_command("cas", key, old, new)
        if self._data.get(key) != old:
            # INSTRUMENT_BLOCK cas-mismatch
            return False
        self._data[key] = new
        return True

    # INSTRUMENT_FUNC apply-append
    @replicated
    def append(self, key: str, value: object) -> bool:
        self._chain_command("append", key, value)
        self._append(key, value)
        return True

    # INSTRUMENT_FUNC apply-txn
    @replicated
    def txn(self, mops: list[tuple[str, str, object]]) -> list[object]:
        """Micro-ops applied as one log entry: ("r", k, None) reads, ("a", k, v) appends,
        ("w", k, v) writes. What each read saw (a list copied), None for the others."""
        self._chain_command("txn", mops)
        seen: list[object] = []
        for f, key, value in mops:
            if f == "r":
                current = self._data.get(key)
                seen.append(list(current) if isinstance(current, list) else current)
                continue
            if f == "a":
                self._append(key, value)
            else:
                self._data[key] = value
            seen.append(None)
        return seen

    def _append(self, key: str, value: object) -> None:
        """Not @replicated: called while a command is applied, on every node alike."""
        current = self._data.get(key)
        if not isinstance(current, list):
            current = [] if current is None else [current]
        self._data[key] = [*current, value]

    # INSTRUMENT_FUNC apply-get
    @replicated
    def get(self, key: str) -> object:
        self._chain_command("get", key)
        return self._data.get(key)

    def digest(self, index: int | None = None) -> str:
        """DIGEST's reply: the chain's last value, or its value after command `index`."""
        if index is None:
            applied, value = self._chain
            return f"OK applied={applied} chain={value}"
        value = self._chain_kept.get(index)
        return "ERR not-kept" if value is None else f"OK index={index} chain={value}"


def _value(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        return text


def _parse_txn(words: list[str]) -> list[tuple[str, str, object]] | None:
    """`r:k`, `a:k:v`, `w:k:v` words as micro-ops; None if any is malformed."""
    mops: list[tuple[str, str, object]] = []
    for word in words:
        parts = word.split(":")
        if parts[0] == "r" and len(parts) == 2 and parts[1]:
            mops.append(("r", parts[1], None))
        elif parts[0] in ("a", "w") and len(parts) == 3 and parts[1] and parts[2]:
            mops.append((parts[0], parts[1], _value(parts[2])))
        else:
            return None
    return mops or None


def _show(value: object) -> str:
    if value is None:
        return "nil"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class Service:
    def __init__(self, store: KVStore, op_timeout: float) -> None:
        self.store = store
        self.op_timeout = op_timeout

    # INSTRUMENT_FUNC client-request
    def handle(self, line: str) -> str:
        words = line.split()
        if not words:
            return "ERR empty request"
        op, args = words[0].upper(), words[1:]
        if op == "STATUS" and not args:
            return self.status()
        if op == "DIGEST" and len(args) <= 1 and all(a.isdigit() for a in args):
            return self.store.digest(int(args[0]) if args else None)
        if op == "TXN":
            mops = _parse_txn(args)
            if mops is None:
                return f"ERR bad transaction {line.strip()!r}: TXN r:k a:k:v w:k:v ..."
            seen, error = self._apply(self.store.txn, mops)
            return error or "OK " + " ".join(_show(v) if f == "r" else "_" for (f, _, _), v in zip(mops, seen))
        calls = {"GET": (self.store.get, 1), "PUT": (self.store.put, 2), "CAS": (self.store.cas, 3),
                 "APPEND": (self.store.append, 2)}
        if op not in calls or len(args) != calls[op][1]:
            return f"ERR bad request {line.strip()!r}: GET k | PUT k v | CAS k old new | APPEND k v | TXN ... | STATUS"
        result, error = self._apply(calls[op][0], args[0], *(_value(a) for a in args[1:]))
        if error:
            return error
        if op == "GET":
            return f"OK {_show(result)}"
        return "OK" if result else "FAIL mismatch"

    def _apply(self, method: Callable[..., Any], *args: object) -> tuple[Any, str | None]:
        """Run a replicated method and wait until it is applied: (its result, None), or
        (None, the ERR / UNKNOWN reply) when it failed or its outcome is unknown."""
        try:
            return method(*args, sync=True, timeout=self.op_timeout), None
        except SyncObjException as exc:
            reason = _NOT_APPLIED.get(exc.errorCode)
            if reason is not None:
                # INSTRUMENT_BLOCK op-rejected
                return None, f"ERR {reason}"
            # INSTRUMENT_BLOCK op-unknown
            return None, f"UNKNOWN {_MAYBE_APPLIED.get(exc.errorCode, str(exc.errorCode).lower())}"

    def status(self) -> str:
        store = self.store
        leader = store._getLeader()
        role = "leader" if store._isLeader() else ("follower" if leader else "candidate")
        return f"OK role={role} leader={leader.address if leader else '-'} term={store.raftCurrentTerm}"


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        service: Service = self.server.service  # type: ignore[attr-defined]
        for raw in self.rfile:
            reply = service.handle(raw.decode(errors="replace"))
            self.wfile.write(reply.encode() + b"\n")
            self.wfile.flush()


class _ClientServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


# INSTRUMENT_FUNC role-changed
def _on_state_changed(old: int, new: int) -> None:
    print(f"role {_ROLES.get(old, old)} -> {_ROLES.get(new, new)}", flush=True)


def _watch_leader(store: KVStore, stop: threading.Event) -> None:
    """Print every change of the leader this node knows (the readiness line)."""
    known = None
    while not stop.wait(0.05):
        leader = store._getLeader()
        address = leader.address if leader else None
        if address != known:
            known = address
            role = "leader" if store._isLeader() else "follower"
            if address:
                print(f"leader is {address} (self {role}, term {store.raftCurrentTerm})", flush=True)
            else:
                print(f"no leader (term {store.raftCurrentTerm})", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="replicated key-value service on pysyncobj")
    p.add_argument("--listen", required=True, help="this node's address")
    p.add_argument("--client-port", type=int, required=True)
    p.add_argument("--peer-port", type=int, required=True)
    p.add_argument("--peers", default="", help="IP:PORT of every other node, comma-separated")
    p.add_argument("--data", required=True, help="directory of the Raft journal and dumps")
    p.add_argument("--election-ms", type=int, default=400, help="minimum election timeout (max: twice that)")
    p.add_argument("--heartbeat-ms", type=int, default=50, help="append-entries period")
    p.add_argument("--op-timeout", type=float, default=1.0, help="seconds a client op waits for its commit")
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> SyncObjConf:
    election = args.election_ms / 1000
    return SyncObjConf(
        # pysyncobj binds 0.0.0.0 by default: nodes sharing a host (loopback backend) would clash
        bindAddress=f"{args.listen}:{args.peer_port}",
        journalFile=os.path.join(args.data, "raft.journal"),
        fullDumpFile=os.path.join(args.data, "raft.dump"),
        raftMinTimeout=election,
        raftMaxTimeout=2 * election,
        appendEntriesPeriod=args.heartbeat_ms / 1000,
        # a client op is replicated at once, not with the next heartbeat's batch
        appendEntriesUseBatch=False,
        autoTickPeriod=0.01,
        # a dead connection is noticed, and a healed one retried, within an election or two
        connectionTimeout=3 * election,
        connectionRetryTime=election / 2,
        # a leader cut off from the majority steps down instead of waiting the default 30 s
        leaderFallbackTimeout=3 * election,
        logCompactionMinEntries=2000,
        dynamicMembershipChange=False,
        onStateChanged=_on_state_changed,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.data, exist_ok=True)
    peers = [p for p in args.peers.split(",") if p]
    store = KVStore(f"{args.listen}:{args.peer_port}", peers, config(args))
    stop = threading.Event()
    threading.Thread(target=_watch_leader, args=(store, stop), name="leader-watch", daemon=True).start()
    server = _ClientServer((args.listen, args.client_port), _Handler)
    server.service = Service(store, args.op_timeout)  # type: ignore[attr-defined]
    # SIGTERM: stop serving, then close the journal (SIGKILL is the nemesis's crash)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"serving clients on {args.listen}:{args.client_port}, raft on {args.listen}:{args.peer_port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        stop.set()
        server.server_close()
        store.destroy_synchronous()
    return 0


if __name__ == "__main__":
    sys.exit(main())
