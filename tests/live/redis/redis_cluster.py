"""Helpers shared by the real-Redis tests: free ports and a Redis spec."""

from __future__ import annotations

import socket
from collections import defaultdict
from typing import Any, Iterable

REDIS_SPEC = """
name = "redis"

[start]
command = ["redis-server", "--bind", "{address}", "--port", "{port}", "--dir", "{data_dir}",
           "--save", "", "--appendonly", "no", "--protected-mode", "no", "--logfile", ""]

[ports]
client = %(port)d

[stop]
signal = "SIGTERM"
timeout = 5

[ready]
probe = "%(probe)s"
pattern = "Ready to accept connections"
command = ["redis-cli", "-h", "{address}", "-p", "{port}", "ping"]
timeout = 10

[client]
kind = "redis"
timeout = %(client_timeout)s
"""


def redis_spec_text(port: int, probe: str = "tcp", client_timeout: float = 0.5) -> str:
    return REDIS_SPEC % {"port": port, "probe": probe, "client_timeout": client_timeout}


def free_port(addresses: Iterable[str] = ("127.0.0.1",)) -> int:
    """A port that is free on every address (ephemeral from the first, checked on the rest)."""
    addresses = list(addresses)
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
            ok = True
            for addr in addresses[1:]:
                with socket.socket() as t:
                    try:
                        t.bind((addr, port))
                    except OSError:
                        ok = False
                        break
            if ok:
                return port
    raise RuntimeError("no free port")


def check_process_semantics(ops: list[Any]) -> dict[str, int]:
    """Assert Jepsen's process rules on recorded ops; count completions by type."""
    open_: dict[Any, Any] = {}
    retired: set[Any] = set()
    counts: dict[str, int] = defaultdict(int)
    for i, op in enumerate(ops):
        assert op.index == i
        if op.process == "nemesis":
            assert op.type == "info"
            counts["nemesis"] += 1
            continue
        assert op.process not in retired, f"process {op.process} reused after info at {op}"
        if op.type == "invoke":
            assert op.process not in open_, f"two invokes in flight on process {op.process}"
            open_[op.process] = op
        else:
            invoke = open_.pop(op.process)  # at most one completion per invoke
            assert invoke.f == op.f
            if op.type == "info":
                retired.add(op.process)
        counts[op.type] += 1
    times = [op.time for op in ops]
    assert times == sorted(times)
    return dict(counts)
