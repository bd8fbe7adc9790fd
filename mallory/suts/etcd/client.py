"""A client for etcd 3.4 through its v3 JSON gateway (HTTP on the client port, keys and
values base64), with the standard library's http.client; for the three workloads.

* register: read = `/v3/kv/range` (linearizable: etcd's default), write = `/v3/kv/put`,
  cas = `/v3/kv/txn` comparing the key's VALUE with the expected one, then putting;
* list-append and rw-register: optimistic transactions. The keys a txn touches are read
  first (in one etcd txn of ranges: one snapshot), the new values computed, then one `/v3/kv/txn`
  commits the writes only if every touched key still has the `mod_revision` it was read
  at (0: still absent). If any changed, nothing was written: the op fails (`conflict`),
  which is a definite outcome. A committed txn is serializable at its commit, so its reads
  (the values read, with its own earlier writes applied) are what it observed there.
  A list is stored as its elements joined by commas.

Outcomes: a read-only op that errs is a `fail` (it changed nothing); a write whose request
may have reached etcd (timeout, connection lost, a server error such as "request timed
out" or "leader changed", after which the proposal may still commit) is `info`; a refused
connection, or a 4xx that says the request was malformed, is a `fail`.
"""

from __future__ import annotations

import base64
import http.client
import socket
from typing import Any, Mapping

import orjson

from mallory.harness.client import (
    Completion,
    fail,
    info,
    key_prefix,
    ok,
    register_parts,
    register_read,
)
from mallory.harness.workload import WORKLOADS
from mallory.history.edn import Keyword


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


class EtcdError(Exception):
    """etcd answered with an error (HTTP status and the gateway's message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class EtcdHttp:
    """One persistent HTTP connection to one member's JSON gateway."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._conn: http.client.HTTPConnection | None = None

    def open(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def call(self, path: str, body: Mapping[str, Any]) -> dict:
        """POST `body` to `path`; the decoded reply, or EtcdError for an error reply.
        Transport errors (OSError, http.client.HTTPException) propagate; the connection is
        then closed."""
        if self._conn is None:
            self.open()
        assert self._conn is not None
        try:
            self._conn.request("POST", path, orjson.dumps(body), {"Content-Type": "application/json"})
            response = self._conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        try:
            doc = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            doc = {"error": raw[:200].decode("utf-8", "replace")}
        if response.status != 200 or "error" in doc:
            raise EtcdError(response.status, str(doc.get("error") or doc.get("message") or raw[:200]))
        return doc


class EtcdClient:
    #: the workloads it runs
    WORKLOADS = WORKLOADS

    def __init__(
        self,
        host: str,
        port: int,
        workload: str,
        *,
        independent: bool = False,
        key_base: int = 0,
        timeout: float = 2.0,
    ) -> None:
        self.workload = workload
        self.independent = independent
        #: added to the register's key on the wire: a campaign gives each schedule fresh keys
        self.key_base = key_base
        self._prefix = key_prefix("etcd", workload)
        self.http = EtcdHttp(host, port, timeout)

    def open(self) -> None:
        self.http.open()

    def close(self) -> None:
        self.http.close()

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        f, value = op["f"], op["value"]
        read_only = f == "read" or (f == "txn" and all(m[0] == "r" for m in value))
        try:
            if f == "txn":
                return self._txn(value)
            return self._register(f, value)
        except ConnectionRefusedError as exc:
            return fail(value, "connection-refused", str(exc))
        except (TimeoutError, socket.timeout) as exc:
            return fail(value, "timeout", str(exc)) if read_only else info(value, "timeout", str(exc))
        except (OSError, http.client.HTTPException) as exc:
            kind = "connection-lost"
            return fail(value, kind, str(exc)) if read_only else info(value, kind, str(exc))
        except EtcdError as exc:
            if read_only or 400 <= exc.status < 500 and exc.status != 408:
                return fail(value, "etcd-error", exc.message)
            return info(value, "etcd-error", exc.message)

    # -- register ------------------------------------------------------------------------

    def _register(self, f: str, value: Any) -> Completion:
        key, arg = register_parts(value, self.independent)
        name = b64(f"{self._prefix}{key + self.key_base}")
        if f == "read":
            kvs = self.http.call("/v3/kv/range", {"key": name}).get("kvs", [])
            got = int(unb64(kvs[0]["value"])) if kvs else None
            return ok(register_read(key, got, self.independent))
        if f == "write":
            self.http.call("/v3/kv/put", {"key": name, "value": b64(str(arg))})
            return ok(value)
        if f == "cas":
            old, new = arg
            reply = self.http.call(
                "/v3/kv/txn",
                {
                    "compare": [{"key": name, "target": "VALUE", "result": "EQUAL", "value": b64(str(old))}],
                    "success": [{"request_put": {"key": name, "value": b64(str(new))}}],
                },
            )
            return ok(value) if reply.get("succeeded") else fail(value, "cas-mismatch")
        return fail(value, "unknown-f", f"register has no op {f!r}")

    # -- transactions --------------------------------------------------------------------

    def _txn(self, txn: list) -> Completion:
        allowed = {"list-append": ("append", "r"), "rw-register": ("w", "r")}.get(self.workload, ())
        if any(str(mop[0]) not in allowed for mop in txn):
            return fail(txn, "unknown-mop", f"{self.workload} cannot run {txn!r}")
        keys = sorted({mop[1] for mop in txn})
        current: dict[Any, Any] = {}
        revisions: dict[Any, str] = {}
        # every key read in one etcd txn: one snapshot (separate ranges would each be
        # linearizable, but a read-only txn made of them would not be atomic)
        snapshot = self.http.call("/v3/kv/txn", {"success": [{"request_range": {"key": self._key(k)}} for k in keys]})
        responses = snapshot.get("responses", [])
        if len(responses) != len(keys):
            return fail(txn, "etcd-error", f"a txn of {len(keys)} ranges answered {len(responses)} responses")
        for k, response in zip(keys, responses):
            kvs = response.get("response_range", {}).get("kvs", [])
            revisions[k] = kvs[0]["mod_revision"] if kvs else "0"
            current[k] = self._decode(unb64(kvs[0]["value"])) if kvs else self._empty()
        filled, written = [], {}
        for f, k, v in txn:
            f = str(f)
            if f == "r":
                seen = current[k]
                filled.append([Keyword("r"), k, list(seen) if isinstance(seen, list) else seen])
            else:
                current[k] = [*current[k], v] if f == "append" else v
                written[k] = current[k]
                filled.append([Keyword(f), k, v])
        if not written:
            return ok(filled)
        reply = self.http.call(
            "/v3/kv/txn",
            {
                "compare": [
                    {"key": self._key(k), "target": "MOD", "result": "EQUAL", "mod_revision": revisions[k]} for k in keys
                ],
                "success": [
                    {"request_put": {"key": self._key(k), "value": b64(self._encode(v))}} for k, v in sorted(written.items())
                ],
            },
        )
        return ok(filled) if reply.get("succeeded") else fail(txn, "conflict")

    def _key(self, k: Any) -> str:
        return b64(f"{self._prefix}{k}")

    def _empty(self) -> Any:
        return [] if self.workload == "list-append" else None

    def _encode(self, value: Any) -> str:
        return ",".join(map(str, value)) if self.workload == "list-append" else str(value)

    def _decode(self, text: str) -> Any:
        if self.workload == "list-append":
            return [int(x) for x in text.split(",")] if text else []
        return int(text)

