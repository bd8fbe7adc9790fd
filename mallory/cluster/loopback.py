"""A cluster backend without root: every node is a set of processes on this host.

Node `n<i>` binds 127.0.0.<i+1> (the whole 127/8 is loopback on Linux), so every node can
use the same ports, as on the network-namespace backend, and nothing leaves the machine.
There is no gateway here: client and peer traffic go straight over loopback, so the
mediator sees none of it. It is for developing adapters and for tests, not for fuzzing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal as signals
import subprocess
import tempfile
import threading
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Mapping, Sequence

from mallory.cluster.backend import NodeProcess
from mallory.cluster.registry import ProcessId
from mallory.errors import MalloryError

#: The shm ring names a loopback backend gives its nodes (MALLORY_SHM): the owning process's
#: pid, so rings a killed process left behind can be told from live ones. A name holds the
#: pid alone (no start ticks, unlike a registered run's owner): a dead owner's pid reused by
#: another process keeps its rings until that one ends too, which errs on the safe side.
_RING = re.compile(r"^mallory-(\d+)-(n\d+)$")


def _ring_name(pid: int, node: str) -> str:
    return f"/mallory-{pid}-{node}"


def remove_dead_rings(claimed: AbstractSet[str] = frozenset()) -> list[str]:
    """Unlink loopback rings whose owning process is gone (left by a kill -9), except names
    in `claimed` (a netns run named like a number uses the same shape: its journal claims it).
    Liveness is judged as for a registered run's owner (registry.ProcessId)."""
    removed = []
    for path in sorted(Path("/dev/shm").glob("mallory-*")):
        found = _RING.match(path.name)
        if found is None or f"/{path.name}" in claimed or ProcessId(int(found.group(1)), None).alive():
            continue
        path.unlink(missing_ok=True)
        removed.append(f"shm /{path.name}")
    return removed


class LoopbackBackend:
    name = "loopback"

    def __init__(self, node_count: int = 3, root: Path | None = None) -> None:
        if not 1 <= node_count <= 250:
            raise MalloryError(f"loopback backend supports 1..250 nodes, not {node_count}")
        self.nodes: Sequence[str] = tuple(f"n{i + 1}" for i in range(node_count))
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="mallory-loopback-")) if root is None else Path(root)
        self._procs: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        for node in self.nodes:
            self.data_dir(node).mkdir(parents=True, exist_ok=True)
            self.log_dir(node).mkdir(parents=True, exist_ok=True)

    def _check(self, node: str) -> None:
        if node not in self.nodes:
            raise MalloryError(f"no node {node!r} in the loopback cluster ({', '.join(self.nodes)})")

    def node_address(self, node: str) -> str:
        self._check(node)
        return f"127.0.0.{self.nodes.index(node) + 1}"

    def client_address(self, node: str) -> str:
        return self.node_address(node)

    def data_dir(self, node: str) -> Path:
        self._check(node)
        return self.root / "data" / node

    def log_dir(self, node: str) -> Path:
        self._check(node)
        return self.root / "logs" / node

    def shm_name(self, node: str) -> str:
        """The node's ring name (MALLORY_SHM). Whoever observes the node creates the ring;
        `down()` removes it."""
        self._check(node)
        return _ring_name(os.getpid(), node)

    def spawn(
        self,
        node: str,
        argv: Sequence[str],
        *,
        name: str = "sut",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> NodeProcess:
        self._check(node)
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.update(
            MALLORY_NODE=node,
            MALLORY_SHM=self.shm_name(node),
            MALLORY_DATA_DIR=str(self.data_dir(node)),
        )
        log_path = self.log_dir(node) / f"{name}.log"
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=cwd or self.data_dir(node),
                    start_new_session=True,  # own process group: signals reach its children too
                )
            except OSError as exc:
                raise MalloryError(f"cannot start {name} on {node}: {argv[0]}: {exc.strerror}") from None
        with self._lock:
            self._procs[proc.pid] = proc
        return NodeProcess(node=node, name=name, pid=proc.pid, log_path=log_path)

    def _popen(self, proc: NodeProcess) -> subprocess.Popen:
        with self._lock:
            popen = self._procs.get(proc.pid)
        if popen is None:
            raise MalloryError(f"process {proc.name} (pid {proc.pid}) on {proc.node} was not started here")
        return popen

    def signal(self, proc: NodeProcess, signum: int) -> None:
        popen = self._popen(proc)
        if popen.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    def is_running(self, proc: NodeProcess) -> bool:
        return self._popen(proc).poll() is None

    def wait(self, proc: NodeProcess, timeout: float) -> int | None:
        try:
            return self._popen(proc).wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def down(self) -> None:
        """Kill every process this backend started and remove the data dirs and the nodes'
        rings (logs stay)."""
        with self._lock:
            procs = list(self._procs.values())
        for popen in procs:
            if popen.poll() is None:
                try:
                    os.killpg(popen.pid, signals.SIGKILL)
                except ProcessLookupError:
                    pass
                popen.wait()
        shutil.rmtree(self.root / "data", ignore_errors=True)
        for node in self.nodes:
            Path("/dev/shm", self.shm_name(node).lstrip("/")).unlink(missing_ok=True)

    def destroy(self) -> None:
        """down(), then remove the logs too when the backend made its own root."""
        self.down()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LoopbackBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
