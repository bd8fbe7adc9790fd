"""A real client for Redis, for the three workloads.

* register: GET / SET, and CAS as a Lua script (atomic on the server);
* list-append: one MULTI/EXEC of RPUSH and LRANGE micro-ops, so a txn is atomic and its
  reads see its own earlier appends;
* rw-register: one MULTI/EXEC of SET and GET micro-ops.

It speaks through one raw redis-py `Connection` with retries switched off: a library that
silently re-sends a command after a lost connection would turn one append into two and
invent duplicate elements. A timeout or a connection lost after the request was sent is an
`info`; a reply that is an error (READONLY, LOADING, EXECABORT) is a `fail`, since Redis
did not run the command.
"""

from __future__ import annotations

from typing import Any, Mapping

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.retry import Retry

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

_CAS_SCRIPT = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
    "redis.call('SET', KEYS[1], ARGV[2]) return 1 else return 0 end"
)


def admin_connection(host: str, port: int, timeout: float = 1.0) -> redis.Redis:
    """A redis-py handle for one-off admin commands (INFO, REPLICAOF, SENTINEL ...) to a
    server or a sentinel: replies decoded, no retries (a command that did not get through
    says so at once)."""
    return redis.Redis(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
                       retry=Retry(NoBackoff(), 0), decode_responses=True)


class RedisClient:
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
        self.host = host
        self.port = port
        self.workload = workload
        self.independent = independent
        #: added to the register's key on the wire: a campaign gives each schedule fresh keys
        self.key_base = key_base
        self.timeout = timeout
        self._prefix = key_prefix("redis", workload)
        self._conn: Connection | None = None

    def open(self) -> None:
        conn = Connection(
            host=self.host,
            port=self.port,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
        )
        conn.connect()
        self._conn = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        value = op["value"]
        if self._conn is None:
            return fail(value, "not-connected")
        try:
            if op["f"] == "txn":
                return self._txn(value)
            return self._register(op["f"], value)
        except rex.TimeoutError as exc:
            return info(value, "timeout", str(exc))
        except rex.BusyLoadingError as exc:  # a ConnectionError subclass, but nothing ran
            return fail(value, "loading", str(exc))
        except (rex.ConnectionError, OSError) as exc:
            self.close()
            return info(value, "connection-lost", str(exc))
        except rex.ResponseError as exc:
            return fail(value, "redis-error", _describe(exc))

    # -- register ------------------------------------------------------------------------

    def _register(self, f: str, value: Any) -> Completion:
        key, arg = register_parts(value, self.independent)
        name = f"{self._prefix}{key + self.key_base}"
        if f == "read":
            got = _int_or_none(self._call("GET", name))
            return ok(register_read(key, got, self.independent))
        if f == "write":
            self._call("SET", name, arg)
            return ok(value)
        if f == "cas":
            old, new = arg
            swapped = self._call("EVAL", _CAS_SCRIPT, 1, name, old, new)
            return ok(value) if swapped == 1 else fail(value, "cas-mismatch")
        return fail(value, "unknown-f", f"register has no op {f!r}")

    # -- transactions --------------------------------------------------------------------

    def _txn(self, txn: list) -> Completion:
        commands = [self._mop_command(mop) for mop in txn]
        if any(c is None for c in commands):
            return fail(txn, "unknown-mop", f"{self.workload} cannot run {txn!r}")
        results = self._multi_exec(commands)  # type: ignore[arg-type]
        if isinstance(results, Exception):
            return fail(txn, "redis-error", _describe(results))
        broken = [r for r in results if isinstance(r, Exception)]
        if broken:
            # A runtime error inside EXEC: the other micro-ops did run. Nothing definite to say.
            return info(txn, "partial-exec", str(broken[0]))
        filled = []
        for (f, k, v), result in zip(txn, results):
            if f == "r":
                v = [int(x) for x in result] if self.workload == "list-append" else _int_or_none(result)
            filled.append([Keyword(f), k, v])
        return ok(filled)

    def _mop_command(self, mop: list) -> tuple | None:
        f, k, v = mop
        name = f"{self._prefix}{k}"
        if self.workload == "list-append":
            if f == "append":
                return ("RPUSH", name, v)
            if f == "r":
                return ("LRANGE", name, 0, -1)
        elif self.workload == "rw-register":
            if f == "w":
                return ("SET", name, v)
            if f == "r":
                return ("GET", name)
        return None

    # -- wire ----------------------------------------------------------------------------

    def _call(self, *args: Any) -> Any:
        assert self._conn is not None
        self._conn.send_command(*args)
        return self._conn.read_response()

    def _multi_exec(self, commands: list[tuple]) -> list | Exception:
        """Send MULTI, the commands and EXEC in one write; EXEC's replies, or the error that
        aborted the transaction. Every reply is read so the connection stays in step."""
        assert self._conn is not None
        self._conn.send_packed_command(self._conn.pack_commands([("MULTI",), *commands, ("EXEC",)]))
        first_error: Exception | None = None
        for _ in range(len(commands) + 1):  # +OK for MULTI, +QUEUED per command
            try:
                self._conn.read_response()
            except rex.ResponseError as exc:
                first_error = first_error or exc
        try:
            results = self._conn.read_response()
        except rex.ResponseError as exc:
            return first_error or exc
        if results is None:
            return first_error or rex.ResponseError("EXEC returned nil")
        return list(results)


def _describe(exc: Exception) -> str:
    """redis-py strips the error code (READONLY, EXECABORT) into the class: keep both."""
    return f"{type(exc).__name__}: {exc}"


def _int_or_none(raw: Any) -> int | None:
    return None if raw is None else int(raw)
