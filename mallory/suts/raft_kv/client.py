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

from typing import Any, Mapping

from mallory.harness.client import Completion, fail, info, ok
from mallory.harness.line_client import LineConnection
from mallory.history.edn import Keyword

_WIRE = {("list-append", "append"): "a", ("list-append", "r"): "r", ("rw-register", "w"): "w", ("rw-register", "r"): "r"}
_PREFIX = {"list-append": "l", "rw-register": "w"}


class RaftTxnClient(LineConnection):
    #: the workloads it runs
    WORKLOADS = tuple(_PREFIX)

    def __init__(self, host: str, port: int, workload: str, *, timeout: float = 2.0) -> None:
        if workload not in _PREFIX:
            raise ValueError(f"the raft-kv txn client runs list-append and rw-register, not {workload!r}")
        super().__init__(host, port, timeout=timeout)
        self.workload = workload

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
        reply = self.exchange(txn, request)
        if isinstance(reply, Completion):
            return reply
        word, rest = reply
        if word == "OK":
            return self._filled(txn, rest.split())
        return fail(txn, "error", f"{word} {rest}".strip())

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
