"""raft-kv's transaction client (suts/raft): the list-append and rw-register workloads.

A txn is one request line, applied by the server as one log entry (so atomically):

    TXN r:k a:k:v w:k:v ...   ->  OK <one token per mop: a read's value (nil: none), _ else>
                                  | ERR not-leader <host or -> | ERR <why> | UNKNOWN <why>

A list is its values joined by commas ("1,2,3"). Keys go on the wire as `l<k>` (list-append)
or `w<k>` (rw-register), apart from the register workload's keys. `OK` is an ok with the
reads filled in; `ERR` a fail (nothing applied); `UNKNOWN`, a timeout or a lost connection an
info. A follower names the leader's host; the client follows it, to the same port, a few
times (as the line client does for registers).
"""

from __future__ import annotations

import socket
from typing import Any, Mapping

from mallory.harness.client import Completion, fail, info, ok
from mallory.oracles.edn import Keyword

MAX_REDIRECTS = 3
_WIRE = {("list-append", "append"): "a", ("list-append", "r"): "r", ("rw-register", "w"): "w", ("rw-register", "r"): "r"}
_PREFIX = {"list-append": "l", "rw-register": "w"}


class RaftTxnClient:
    def __init__(self, host: str, port: int, workload: str, *, timeout: float = 2.0) -> None:
        if workload not in _PREFIX:
            raise ValueError(f"the raft-kv txn client runs list-append and rw-register, not {workload!r}")
        self.host = host
        self.port = port
        self.workload = workload
        self.timeout = timeout
        self._target = host
        self._sock: socket.socket | None = None
        self._buf = b""

    def open(self) -> None:
        self._connect(self.host)

    def _connect(self, host: str) -> None:
        self.close()
        self._sock = socket.create_connection((host, self.port), timeout=self.timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._target = host

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = b""

    def request_line(self, txn: list) -> str | None:
        """The TXN line for `txn`, or None when a mop is not this workload's."""
        mops = []
        for f, k, v in txn:
            wire = _WIRE.get((self.workload, str(f)))
            if wire is None:
                return None
            key = f"{_PREFIX[self.workload]}{k}"
            mops.append(f"r:{key}" if wire == "r" else f"{wire}:{key}:{v}")
        return "TXN " + " ".join(mops)

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        txn = op["value"]
        if op["f"] != "txn":
            return fail(txn, "unknown-f", f"{self.workload} has no op {op['f']!r}")
        request = self.request_line(txn)
        if request is None:
            return fail(txn, "unknown-mop", f"{self.workload} cannot run {txn!r}")
        for _ in range(MAX_REDIRECTS + 1):
            if self._sock is None:
                try:
                    self._connect(self.host)
                except OSError as exc:
                    return fail(txn, "not-connected", str(exc))
            try:
                reply = self._call(request)
            except socket.timeout:
                self.close()
                return info(txn, "timeout")
            except OSError as exc:
                self.close()
                return info(txn, "connection-lost", str(exc))
            word, _, rest = reply.partition(" ")
            if word == "OK":
                return self._filled(txn, rest.split())
            if word == "UNKNOWN":
                return info(txn, "unknown", rest or None)
            if word == "ERR" and rest.startswith("not-leader"):
                parts = rest.split()
                leader = parts[1] if len(parts) > 1 else "-"
                if leader in ("-", self._target):
                    return fail(txn, "not-leader")
                try:
                    self._connect(leader)
                except OSError as exc:
                    self.close()
                    return fail(txn, "not-leader", f"leader {leader} unreachable: {exc}")
                continue
            return fail(txn, "error", reply)
        return fail(txn, "not-leader", "too many redirects")

    def _filled(self, txn: list, results: list[str]) -> Completion:
        if len(results) != len(txn):
            # the server applied something, but what it read cannot be told: unknown
            return info(txn, "bad-reply", " ".join(results))
        filled = []
        for (f, k, v), said in zip(txn, results):
            if str(f) == "r":
                if self.workload == "list-append":
                    v = [] if said == "nil" else [int(x) for x in said.split(",")]
                else:
                    v = None if said == "nil" else int(said)
            filled.append([Keyword(str(f)), k, v])
        return ok(filled)

    def _call(self, request: str) -> str:
        assert self._sock is not None
        self._sock.sendall(request.encode() + b"\n")
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("server closed the connection")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode(errors="replace").strip()
