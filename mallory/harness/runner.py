"""Concurrent workers driving a workload through clients into a history, Jepsen-style.

Worker `i` starts as process `i`. Each op is recorded as an invoke before the client runs
it and as exactly one completion after. After an `info` (outcome unknown) the process id is
retired: the worker closes its client, opens a fresh one and goes on as process
`p + concurrency`, so no process id ever has two ops in flight, as in Jepsen. When the time
limit passes, workers finish the op in flight and stop.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from mallory.errors import MalloryError
from mallory.harness.client import Client, Completion, info
from mallory.harness.history import HistoryRecorder
from mallory.harness.workload import Workload


@dataclass(frozen=True)
class RunConfig:
    concurrency: int = 5
    time_limit: float = 10.0  # seconds
    rate: float | None = None  # ops per second over all workers; None = as fast as possible
    op_limit: int | None = None  # stop after this many invokes in all
    reopen_delay: float = 0.1  # seconds between attempts to open a client that failed to open
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise MalloryError(f"run concurrency must be at least 1, not {self.concurrency}")
        if self.time_limit <= 0:
            raise MalloryError(f"run time_limit must be positive, not {self.time_limit}")
        if self.rate is not None and self.rate <= 0:
            raise MalloryError(f"run rate must be positive, not {self.rate}")


@dataclass
class RunSummary:
    invokes: int = 0
    completions: Counter[str] = field(default_factory=Counter)
    open_failures: int = 0
    processes: int = 0
    elapsed: float = 0.0


class _Pacer:
    """Spaces invokes `1/rate` apart over all workers."""

    def __init__(self, rate: float | None) -> None:
        self._interval = 1.0 / rate if rate else 0.0
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self, deadline: float, stop: threading.Event) -> bool:
        if not self._interval:
            return not stop.is_set()
        with self._lock:
            slot = max(self._next, time.monotonic())
            self._next = slot + self._interval
        if slot >= deadline:
            return False
        return not stop.wait(max(0.0, slot - time.monotonic()))


class WorkloadRunner:
    """Runs `workload` with `config.concurrency` workers; `client_for(worker)` makes a client."""

    def __init__(
        self,
        workload: Workload,
        client_for: Callable[[int], Client],
        recorder: HistoryRecorder,
        config: RunConfig = RunConfig(),
    ) -> None:
        self.workload = workload
        self.client_for = client_for
        self.recorder = recorder
        self.config = config
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._summary = RunSummary()
        self._pacer = _Pacer(config.rate)
        self._crash: BaseException | None = None

    def stop(self) -> None:
        """Ask the workers to stop after their op in flight (e.g. from a signal handler)."""
        self._stop.set()

    def run(self) -> RunSummary:
        start = time.monotonic()
        deadline = start + self.config.time_limit
        threads = [
            threading.Thread(target=self._worker, args=(i, deadline), name=f"mallory-worker-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._summary.elapsed = time.monotonic() - start
        if self._crash is not None:
            raise self._crash
        return self._summary

    def _take_invoke_slot(self) -> bool:
        with self._lock:
            if self.config.op_limit is not None and self._summary.invokes >= self.config.op_limit:
                return False
            self._summary.invokes += 1
            return True

    def _running(self, deadline: float) -> bool:
        return not self._stop.is_set() and time.monotonic() < deadline

    def _open(self, worker: int, deadline: float) -> Client | None:
        while self._running(deadline):
            client = self.client_for(worker)
            try:
                client.open()
                return client
            except Exception:
                with self._lock:
                    self._summary.open_failures += 1
                _close_quietly(client)
                self._stop.wait(self.config.reopen_delay)
        return None

    def _worker(self, worker: int, deadline: float) -> None:
        """Run one worker; a harness-side crash (workload, recorder) stops every worker and
        is raised from run(), rather than dying silently in a thread."""
        try:
            self._work(worker, deadline)
        except BaseException as exc:
            with self._lock:
                self._crash = self._crash or exc
            self._stop.set()

    def _work(self, worker: int, deadline: float) -> None:
        rng = random.Random(f"{self.config.seed}:{worker}")
        process = worker
        with self._lock:
            self._summary.processes += 1
        client = self._open(worker, deadline)
        try:
            while client is not None and self._running(deadline):
                if not self._pacer.wait(deadline, self._stop) or not self._take_invoke_slot():
                    break
                op = self.workload.next_op(rng)
                self.recorder.invoke(process, op["f"], op["value"])
                completion = _invoke_safely(client, op)
                self.recorder.complete(process, completion.type, completion.value, completion.error)
                with self._lock:
                    self._summary.completions[completion.type] += 1
                if completion.type == "info":
                    process += self.config.concurrency
                    with self._lock:
                        self._summary.processes += 1
                    _close_quietly(client)
                    client = self._open(worker, deadline)
        finally:
            if client is not None:
                _close_quietly(client)


def _invoke_safely(client: Client, op: dict) -> Completion:
    """A client bug must not leave an invoke without completion: it becomes an info."""
    try:
        return client.invoke(op)
    except Exception as exc:  # noqa: BLE001 - any escape means "outcome unknown"
        return info(op["value"], "client-exception", f"{type(exc).__name__}: {exc}")


def _close_quietly(client: Client) -> None:
    try:
        client.close()
    except Exception:
        pass
