"""ObservedStack with real child processes on a loopback backend (no root): the mediator's
token reaches it in a 0600 file, never in argv; the watchdog restarts a dead observer and
ends the campaign on a dead mediator. Stand-ins play the mediator and the observers; a
counting client plays the mediator's metrics."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from mallory.campaign.loop import ComponentDied
from mallory.campaign.observed import TOKEN_FILE, ObservedStack
from mallory.cluster.backend import NodeProcess
from mallory.cluster.journaled import GATEWAY
from mallory.cluster.loopback import LoopbackBackend
from mallory.cluster.registry import register_run
from mallory.polling import wait_until

#: `mallory mediator` stand-in: ready once it has read a non-empty token from its file.
MEDIATOR = """
import pathlib, sys, time
args = sys.argv[1:]
if pathlib.Path(args[args.index("--token-file") + 1]).read_text():
    pathlib.Path(args[args.index("--ready-file") + 1]).write_text("ready")
time.sleep(600)
"""
#: `mallory observe` stand-in: says it runs by a file named by its pid in its node's data
#: directory (a real observer's first batch, too, comes from the running program).
OBSERVER = """
import os, pathlib, time
pathlib.Path(os.environ["MALLORY_DATA_DIR"], f"up-{os.getpid()}").touch()
time.sleep(600)
"""


class GatewayLoopback(LoopbackBackend):
    """A loopback backend with what the stack needs of a journaled one: a registered run and
    the gateway pseudo-node."""

    def __init__(self, root: Path) -> None:
        super().__init__(2, root / "cluster")
        self.record = register_run("stack", root / "state", root / "data")
        for where in (self.data_dir(GATEWAY), self.log_dir(GATEWAY)):
            where.mkdir(parents=True, exist_ok=True)

    def _check(self, node: str) -> None:
        if node != GATEWAY:
            super()._check(node)


class CountingClient:
    """At each look, every observer that runs has delivered one more batch (but those of
    `silent` nodes: an observer that never gets through). One runs once it says so: a
    process just spawned may still be in its execve, not yet the observer (a real one
    sends no batch before then)."""

    def __init__(self, stack: ObservedStack) -> None:
        self.stack = stack
        self.batches: Counter[str] = Counter()
        self.silent: set[str] = set()

    def metrics(self) -> dict:
        for proc in self.stack.observers:
            if self._runs(proc) and proc.node not in self.silent:
                self.batches[proc.node] += 1
        return {"ingest": {"nodes": {node: {"batches": n} for node, n in self.batches.items()}}}

    def _runs(self, proc: NodeProcess) -> bool:
        up = self.stack.cluster.data_dir(proc.node) / f"up-{proc.pid}"
        return self.stack.cluster.is_running(proc) and up.exists()


class StandInStack(ObservedStack):
    start_timeout = 5.0

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.token = secrets.token_hex(16)
        self.cluster = GatewayLoopback(root)
        self.client = CountingClient(self)
        self._start(None, 100.0, None)

    def _mediator_command(self) -> list[str]:
        return [sys.executable, "-c", MEDIATOR]

    def _observer_command(self, node: str) -> list[str]:
        return [sys.executable, "-c", OBSERVER]


@pytest.fixture
def stack(tmp_path):
    with StandInStack(tmp_path) as stack:
        yield stack


def kill(stack: StandInStack, proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    wait_until(lambda: not stack.cluster.is_running(proc), 5, "the kill")


def test_the_token_travels_in_a_private_file_never_in_argv(stack):
    token_file = stack.cluster.record.state_dir / TOKEN_FILE
    assert token_file.read_text() == stack.token and token_file.stat().st_mode & 0o777 == 0o600
    argv = Path(f"/proc/{stack.mediator_proc.pid}/cmdline").read_bytes().split(b"\0")
    assert str(token_file).encode() in argv and not any(stack.token.encode() in arg for arg in argv)


def _environment(proc: NodeProcess) -> dict[str, str]:
    """The environment `proc` was started with. Only for a process that has run: spawn()
    returns once the child's execve has closed its close-on-exec files, and the kernel fills
    in the new image's environment after that (the file reads empty until then)."""
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
    assert environ, f"/proc/{proc.pid}/environ is empty: the process has not finished its execve"
    env = dict(e.decode().partition("=")[::2] for e in environ.split(b"\0") if e)
    # spawn() sets MALLORY_NODE: without it, this is not the environment spawn() gave
    assert env.get("MALLORY_NODE") == proc.node, f"pid {proc.pid} shows another environment: {sorted(env)}"
    return env


def test_mediator_and_observers_run_with_two_malloc_arenas(stack, monkeypatch):
    for proc in (stack.mediator_proc, *stack.observers):
        assert _environment(proc).get("MALLOC_ARENA_MAX") == "2"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # the user's own choice wins, restarts too
    kill(stack, stack.observers[0])
    stack.revive_dead()
    assert _environment(stack.observers[0]).get("MALLOC_ARENA_MAX") == "4"


def test_the_mediator_alone_runs_without_pymalloc(stack):
    users = os.environ.get("PYTHONMALLOC")  # the user's own choice wins
    assert _environment(stack.mediator_proc).get("PYTHONMALLOC") == (users or "malloc")
    for proc in stack.observers:
        assert _environment(proc).get("PYTHONMALLOC") == users


def test_the_watchdog_restarts_a_dead_observer_and_waits_for_its_batches(stack):
    assert stack.revive_dead() == []
    dead = stack.observers[1]
    kill(stack, dead)
    assert stack.revive_dead() == ["observer n2"]
    reborn = stack.observers[1]
    assert reborn.node == "n2" and reborn.pid != dead.pid and stack.cluster.is_running(reborn)
    assert stack.revive_dead() == []


def test_an_observer_that_does_not_come_back_ends_the_campaign(stack):
    stack.start_timeout = 0.3
    stack.client.silent.add("n1")
    kill(stack, stack.observers[0])
    with pytest.raises(ComponentDied, match=r"an observer died and did not come back .* its log: .*observer\.log"):
        stack.revive_dead()


def test_a_dead_mediator_ends_the_campaign_naming_its_log(stack):
    kill(stack, stack.mediator_proc)
    with pytest.raises(ComponentDied, match=r"the mediator \(pid \d+\) was killed by SIGKILL; its log: .*mediator\.log"):
        stack.revive_dead()


def test_a_mediator_dying_within_the_grace_is_dead(stack):
    """A killed process drops its connections before it shows as dead: the failure path asks
    with a grace, and a mediator that ends within it ends the campaign."""
    proc = stack.mediator_proc
    os.kill(proc.pid, signal.SIGSTOP)  # alive for now; the grace sees it end
    threading.Timer(0.3, os.kill, (proc.pid, signal.SIGKILL)).start()
    with pytest.raises(ComponentDied, match=r"the mediator \(pid \d+\) was killed by SIGKILL"):
        stack.revive_dead(grace_s=5.0)


def test_a_live_mediator_outlasts_the_grace(stack):
    assert stack.revive_dead(grace_s=0.2) == []
    assert stack.cluster.is_running(stack.mediator_proc)


#: stand-ins that write "<who> stopped" to the file in STOP_LOG when SIGTERM stops them
#: ("<who> up" once they can); an observer takes a while (a real one cuts and sends its last
#: batches then)
_STOPPING = """
import os, signal, sys, time
def say(what):
    with open(os.environ["STOP_LOG"], "a") as f:
        f.write("{who} " + what + "\\n")
def stop(*_):
    time.sleep({delay})
    say("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
say("up")
"""


class StoppingStack(StandInStack):
    def _mediator_command(self) -> list[str]:
        return [sys.executable, "-c", _STOPPING.format(delay=0, who="mediator") + MEDIATOR]

    def _observer_command(self, node: str) -> list[str]:
        return [sys.executable, "-c", _STOPPING.format(delay=0.3, who="observer") + OBSERVER]


def test_close_stops_the_observers_before_the_mediator_that_takes_their_last_batches(tmp_path, monkeypatch):
    log = tmp_path / "stops"
    monkeypatch.setenv("STOP_LOG", str(log))
    with StoppingStack(tmp_path):
        wait_until(lambda: log.exists() and log.read_text().count("up") == 3, 5, "the stand-ins")
    stops = [line for line in log.read_text().splitlines() if line.endswith("stopped")]
    assert stops == ["observer stopped", "observer stopped", "mediator stopped"]
