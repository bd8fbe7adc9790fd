"""Running the bridge's Clojure test programs (one JVM each) against an in-process mediator."""

from __future__ import annotations

import os
import shutil
import subprocess
import weakref
from dataclasses import dataclass
from typing import Any

import pytest

from mallory import paths
from mallory.history.edn import Keyword, loads
from mallory.learner.learner import Learner
from mallory.mediator.service import MEDIATOR_NODE, Mediator
from mallory.timeline.builder import Committed
from mallory.timeline.event import Kind

BRIDGE = paths.HOME / "jepsen-bridge"
TOKEN = "jepsen-bridge-test"


def clojure() -> str:
    """Debian's `clojure` (installed by scripts/setup.sh from .ci/apt/jepsen.txt)."""
    path = shutil.which("clojure")
    if path is None:  # not a skip: CI installs it, and a missing bridge test must be loud
        pytest.fail("`clojure` is not installed: run scripts/setup.sh (it installs .ci/apt/jepsen.txt)")
    return path


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any]:
        """The program's last stdout line: an EDN map, keys as plain strings."""
        assert self.returncode == 0, f"Clojure program failed ({self.returncode}):\n{self.stderr[-6000:]}\n{self.stdout[-2000:]}"
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return plain(loads(lines[-1], source="program output"))


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str.__str__(k) if isinstance(k, Keyword) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Keyword):
        return str.__str__(value)
    return value


#: each started mediator's committed entries (its ingest keeps none: a subscriber collects them)
_COMMITTED: weakref.WeakKeyDictionary[Mediator, list[Committed]] = weakref.WeakKeyDictionary()


def start_mediator(nodes: dict[str, str]) -> Mediator:
    """An in-process mediator on loopback ports, for a program to drive; `own_events` reads
    what it commits."""
    m = Mediator(nodes, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 batch_interval=0.02)
    _COMMITTED[m] = committed = []
    m.ingest.subscribers.append(committed.extend)
    return m.start()


def own_events(m: Mediator) -> list[tuple[str, int, str]]:
    """The mediator's own committed events (relayed client ops, faults, log lines): what
    the Clojure side caused."""
    kinds = {Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE, Kind.FAULT, Kind.LOG}
    return [(e.event.kind.name, e.event.id, e.event.data) for e in list(_COMMITTED[m])
            if e.event.node == MEDIATOR_NODE and e.event.kind in kinds]


def run_program(program: str, mediator: Mediator, *args: str, timeout: float = 240) -> Run:
    """Runs jepsen-bridge/test/<program> with the bridge's sources and stand-ins on the
    classpath, pointed at `mediator` through MALLORY_URL / MALLORY_TOKEN."""
    host, port = mediator.api.server_address[:2]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "MALLORY_URL": f"http://{host}:{port}", "MALLORY_TOKEN": TOKEN}
    done = subprocess.run([clojure(), "-cp", "src:test", f"test/{program}", *args], cwd=BRIDGE, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return Run(done.returncode, done.stdout, done.stderr)


class RecordingLearner(Learner):
    """The real learner, also keeping every window summary it was shown and every action it
    chose (a spy: the Clojure side must have caused exactly these)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shown: list[frozenset[str]] = []
        self.chosen: list[str] = []

    def observe(self, summary, *args, **kwargs):  # type: ignore[override]
        summary = frozenset(summary)
        self.shown.append(summary)
        return super().observe(summary, *args, **kwargs)

    def next_action(self, actions):  # type: ignore[override]
        action = super().next_action(actions)
        self.chosen.append(action)
        return action
