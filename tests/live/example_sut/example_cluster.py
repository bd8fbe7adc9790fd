"""Helpers for the example SUT's tests: build it with mallory-cc, make its adapter from the
shipped spec, find its leader and talk to it (the mediator + observers: tests/live/stack.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from mallory import paths
from mallory.harness.line_client import request_line
from mallory.harness.spec import parse_spec
from mallory.harness.spec_adapter import SpecAdapter
from mallory.harness.sut_make import make_with_mallory_cc
from mallory.polling import wait_until
from tests.live.stack import start_mediator  # noqa: F401  (the example SUT's tests and raft_sut's use it as ex.start_mediator)

REPO = paths.HOME
SUT_DIR = REPO / "suts" / "example"
SPEC = SUT_DIR / "example.toml"
DEFAULT_BINARY = "build/example-sut"  # as the spec names it, relative to the spec
ELECTION_S = 0.3  # the spec's --election-ms: a node whose loop stood still longer was stalled
LABELS = {
    "election-started", "became-leader", "stepped-down", "replicate", "append-received", "commit",
    "apply", "truncate", "heartbeat-timeout", "client-request", "sticky-leader-kept-term", "stall-catchup-applied",
}


def build(dest: Path) -> Path:
    """Build the SUT with the venv's mallory-cc into dest; the binary's path."""
    make_with_mallory_cc(SUT_DIR, dest, "the example SUT", timeout=300)
    return dest / "example-sut"


def adapter(backend, binary: Path, bugs: str | None = None, client_timeout: float = 1.0) -> SpecAdapter:
    """The shipped spec, pointed at `binary`, with the seeded bugs `bugs` switched on."""
    text = SPEC.read_text().replace(f'"{DEFAULT_BINARY}"', f'"{binary}"')
    assert str(binary) in text and f'"--election-ms", "{round(ELECTION_S * 1000)}"' in text, "update ELECTION_S"
    if bugs:
        text = text.replace('"--heartbeat-ms", "50"]', f'"--heartbeat-ms", "50", "--bugs", "{bugs}"]')
        assert f'"--bugs", "{bugs}"' in text
    text = text.replace("timeout = 1.0", f"timeout = {client_timeout}")
    return SpecAdapter(parse_spec(text, source=str(SPEC)), backend)


def request(address: str, line: str, port: int = 7000, timeout: float = 1.0) -> str:
    """One request line, its reply line ('' when the node does not answer in time)."""
    return request_line(address, port, line, timeout)


def leaders(sut: SpecAdapter) -> list[str]:
    """Nodes that answer a read through the log (only a leader with a majority can)."""
    backend = sut.backend
    return [n for n in backend.nodes if sut.is_running(n) and request(backend.client_address(n), "GET probe", timeout=0.5).startswith("OK")]


def wait_leader(sut: SpecAdapter, timeout: float = 10.0, among: list[str] | None = None) -> str:
    def one() -> str | None:
        found = [n for n in leaders(sut) if among is None or n in among]
        return found[0] if len(found) == 1 else None

    return wait_until(one, timeout, "one leader")  # type: ignore[return-value]


def log_text(sut: SpecAdapter, node: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sut.log_paths(node) if p.exists())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
