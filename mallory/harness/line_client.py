"""A client for line-based key-value SUTs (the example SUT, suts/example), register workload.

One request line, one reply line, over TCP:

    GET k | PUT k v | CAS k old new
    -> OK [value|nil] | FAIL <why> | ERR not-leader <host or -> | ERR <why> | UNKNOWN <why>

`OK` is an ok (a GET's value parsed as an int where it is one); `FAIL` and `ERR` mean the
server did not apply the op (a fail); `UNKNOWN` (the server lost track of it, e.g. its
leader stepped down) and timeouts or lost connections are `info`. A server that is not the
leader names the leader's host; the client follows that hint, to the same port, a few times
before it gives up with a fail (nothing was applied on the way).
"""

from __future__ import annotations

import socket
from typing import Any, Mapping

from mallory.harness.client import (
    Completion,
    fail,
    info,
    ok,
    register_parts,
    register_read,
)

MAX_REDIRECTS = 3


def request_line(address: str, port: int, line: str, timeout: float = 2.0) -> str:
    """One request line on a fresh connection, its reply line ('' when the node does not
    answer in time or closes first): for admin and status commands, not for workload ops."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.decode(errors="replace").strip()
    except OSError:
        return ""


class LineConnection:
    """One kept-open connection to a line-protocol server that follows `ERR not-leader
    <host>` redirects: what the register and the TXN clients share. `exchange` sends one
    request line and gives back the reply split at its first word, or the Completion that
    ends the op when the reply settles nothing more (UNKNOWN, timeouts, redirects gone
    nowhere)."""

    def __init__(self, host: str, port: int, *, timeout: float = 2.0) -> None:
        self.host = host
        self.port = port
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

    def exchange(self, value: Any, request: str) -> tuple[str, str] | Completion:
        """Send `request`, following the leader a few times, to the same port; the first
        reply that is not a redirect as (word, rest), or: a fail when no connection could be
        made or the redirects led nowhere (nothing was applied on the way), an info on
        UNKNOWN, a timeout or a lost connection (the request may have been applied)."""
        for _ in range(MAX_REDIRECTS + 1):
            if self._sock is None:  # a redirect that went nowhere: back to our own node
                try:
                    self._connect(self.host)
                except OSError as exc:
                    return fail(value, "not-connected", str(exc))
            try:
                reply = self._call(request)
            except socket.timeout:
                self.close()
                return info(value, "timeout")
            except OSError as exc:
                self.close()
                return info(value, "connection-lost", str(exc))
            word, _, rest = reply.partition(" ")
            if word == "UNKNOWN":
                return info(value, "unknown", rest or None)
            if not (word == "ERR" and rest.startswith("not-leader")):
                return word, rest
            parts = rest.split()
            leader = parts[1] if len(parts) > 1 else "-"
            if leader in ("-", self._target):
                return fail(value, "not-leader")
            try:
                self._connect(leader)
            except OSError as exc:
                self.close()
                return fail(value, "not-leader", f"leader {leader} unreachable: {exc}")
        return fail(value, "not-leader", "too many redirects")

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


class LineClient(LineConnection):
    #: the workloads it runs
    WORKLOADS = ("register",)

    def __init__(self, host: str, port: int, workload: str, *, independent: bool = False, key_base: int = 0,
                 timeout: float = 2.0) -> None:
        if workload not in self.WORKLOADS:
            raise ValueError(f"the line client runs the register workload only, not {workload!r}")
        super().__init__(host, port, timeout=timeout)
        self.independent = independent
        #: added to the register's key on the wire: a campaign gives each schedule fresh keys
        self.key_base = key_base

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        value = op["value"]
        key, arg = register_parts(value, self.independent)
        f = op["f"]
        wire_key = key + self.key_base
        if f == "read":
            request = f"GET {wire_key}"
        elif f == "write":
            request = f"PUT {wire_key} {arg}"
        elif f == "cas":
            request = f"CAS {wire_key} {arg[0]} {arg[1]}"
        else:
            return fail(value, "unknown-f", f"register has no op {f!r}")
        reply = self.exchange(value, request)
        if isinstance(reply, Completion):
            return reply
        word, rest = reply
        if word == "OK":
            if f != "read":
                return ok(value)
            got = None if rest in ("", "nil") else _int_or_text(rest)
            return ok(register_read(key, got, self.independent))
        if word == "FAIL":
            return fail(value, "cas-mismatch" if rest == "mismatch" else "rejected", rest or None)
        return fail(value, "error", f"{word} {rest}".strip())


def _int_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text
