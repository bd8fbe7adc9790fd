"""Helpers for the example SUT's tests: build it with mallory-cc, make its adapter from the
shipped spec, find its leader, talk to it, and run a mediator + observers on a netns run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from mallory.polling import wait_until
from mallory.harness.spec import parse_spec
from mallory.harness.spec_adapter import SpecAdapter

REPO = Path(__file__).resolve().parents[2]
SUT_DIR = REPO / "suts" / "example"
SPEC = SUT_DIR / "example.toml"
DEFAULT_BINARY = "build/example-sut"  # as the spec names it, relative to the spec
LABELS = {
    "election-started", "became-leader", "stepped-down", "replicate", "append-received", "commit",
    "apply", "truncate", "heartbeat-timeout", "client-request", "sticky-leader-kept-term", "stall-catchup-applied",
}
TOKEN = "example-sut-token"
API_PORT = 7100


def build(dest: Path) -> Path:
    """Build the SUT with the venv's mallory-cc into dest; the binary's path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(["make", "-C", str(SUT_DIR), f"BUILD={dest}"], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"building the example SUT failed:\n{result.stdout}\n{result.stderr}")
    return dest / "example-sut"


def adapter(backend, binary: Path, bugs: str | None = None, client_timeout: float = 1.0) -> SpecAdapter:
    """The shipped spec, pointed at `binary`, with the seeded bugs `bugs` switched on."""
    text = SPEC.read_text().replace(f'"{DEFAULT_BINARY}"', f'"{binary}"')
    assert str(binary) in text
    if bugs:
        text = text.replace('"--heartbeat-ms", "50"]', f'"--heartbeat-ms", "50", "--bugs", "{bugs}"]')
        assert f'"--bugs", "{bugs}"' in text
    text = text.replace("timeout = 1.0", f"timeout = {client_timeout}")
    return SpecAdapter(parse_spec(text, source=str(SPEC)), backend)


def request(address: str, line: str, port: int = 7000, timeout: float = 1.0) -> str:
    """One request line, its reply line ('' when the node does not answer in time)."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.decode().strip()
    except OSError:
        return ""


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


def start_mediator(cluster, record_dir: Path | None = None):
    """`mallory mediator` in the gateway (firewall on FORWARD); its process and a client."""
    from mallory.mediator.client import MediatorClient

    ready = cluster.data_dir("gw") / "ready"
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "mallory.cli", "mediator", "--run", cluster.run, "--token", TOKEN, "--ready-file", str(ready)]
    if record_dir is not None:
        argv += ["--record", str(record_dir)]
    proc = cluster.spawn("gw", argv, name="mediator")
    wait_until(ready.exists, 20, "the mediator")
    return proc, MediatorClient(cluster.layout.gateway_control_address, API_PORT, TOKEN)


def start_observers(cluster) -> dict:
    """`mallory observe` in every node (packets + the node's shm ring, which it creates
    before the SUT starts), batching to the mediator in the gateway."""
    return {
        node: cluster.spawn(node, [sys.executable, "-m", "mallory.cli", "observe", "--run", cluster.run], name="observer")
        for node in cluster.nodes
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
