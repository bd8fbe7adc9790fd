"""Readiness probes: is a node's SUT serving yet?"""

from __future__ import annotations

import re
import signal as signals
import socket
from pathlib import Path
from typing import Mapping, Sequence

from mallory.cluster.backend import ClusterBackend


def tcp_open(address: str, port: int, timeout: float = 0.5) -> bool:
    """True when a TCP connection to address:port succeeds."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def command_succeeds(backend: ClusterBackend, node: str, argv: Sequence[str], timeout: float = 5.0) -> bool:
    """Run argv inside the node (so it sees what the node sees); True when it exits 0."""
    proc = backend.spawn(node, list(argv), name="ready-probe")
    status = backend.wait(proc, timeout)
    if status is None:
        backend.signal(proc, signals.SIGKILL)
        backend.wait(proc, timeout)
        return False
    return status == 0


def log_matches(pattern: re.Pattern[str], paths: Sequence[Path], offsets: Mapping[Path, int]) -> bool:
    """True when `pattern` occurs in one of the files past its offset (what this run wrote)."""
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            continue
        if pattern.search(text):
            return True
    return False
