"""Helpers for the pysyncobj KV service's tests: its catalogue, the line protocol, leaders,
and its adapter from the shipped spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mallory import paths
from mallory.harness.line_client import request_line
from mallory.instrument.catalogue import Catalogue
from mallory.polling import wait_until
from mallory.suts.pysyncobj.adapter import PysyncobjAdapter
from mallory.suts.registry import make_adapter

REPO = paths.HOME
SUT_DIR = REPO / "suts" / "pysyncobj"
SPEC = SUT_DIR / "pysyncobj.toml"
CLIENT_PORT = 7300
#: Traced pysyncobj internals and annotations of the service the tests look for by name.
TRACED = ("raft-become-leader", "raft-leader-changed", "raft-set-term", "raft-log-append", "raft-apply",
          "raft-send-append-entries", "raft-append-response")
ANNOTATED = ("apply-put", "apply-get", "client-request", "role-changed")


def catalogue(dest: Path) -> Catalogue:
    """The service's catalogue, as `python -m mallory.pyinstrument --catalogue` writes it."""
    out = dest / "pysyncobj.mallory.json"
    subprocess.run([sys.executable, "-m", "mallory.pyinstrument", "--annotated", str(SUT_DIR),
                    "--trace-file", str(SUT_DIR / "trace.txt"), "--catalogue", str(out)],
                   check=True, capture_output=True, timeout=60)
    return Catalogue.load(out)


def ids_by_name(cat: Catalogue) -> dict[str, int]:
    return {e.name: e.id for e in cat}


def request(address: str, line: str, port: int = CLIENT_PORT, timeout: float = 3.0) -> str:
    """One request line, its reply line ('' when the node does not answer in time)."""
    return request_line(address, port, line, timeout)


def status(address: str, port: int = CLIENT_PORT) -> dict[str, str]:
    """STATUS as a dict (role, leader, term); {} when the node does not answer."""
    reply = request(address, "STATUS", port, timeout=1.0)
    if not reply.startswith("OK "):
        return {}
    return dict(word.split("=", 1) for word in reply[3:].split())


def adapter(backend) -> PysyncobjAdapter:
    """The built-in `pysyncobj` SUT (the shipped spec)."""
    sut = make_adapter("pysyncobj", backend)
    assert isinstance(sut, PysyncobjAdapter) and sut.spec.source == str(SPEC)
    return sut


def leader_of(sut: PysyncobjAdapter, among: list[str] | None = None) -> str | None:
    """The node every running node of `among` agrees is leader, and that says it is."""
    backend = sut.backend
    nodes = among or list(backend.nodes)
    views = {n: status(backend.client_address(n)) for n in nodes if sut.is_running(n)}
    leaders = {v.get("leader") for v in views.values()}
    if len(leaders) != 1 or None in leaders or "-" in leaders:
        return None
    found = [n for n, v in views.items() if v.get("role") == "leader"]
    return found[0] if len(found) == 1 else None


def wait_leader(sut: PysyncobjAdapter, timeout: float = 20.0, among: list[str] | None = None) -> str:
    return wait_until(lambda: leader_of(sut, among), timeout, "one leader all nodes agree on")  # type: ignore[return-value]
