"""`mallory fuzz --workers N`: N campaign workers and one learner as Ray actors.

The only module that imports Ray (`mallory fuzz` imports it only when given --workers; Ray
is the optional dependency `mallory[ray]`). It runs on a Ray cluster: a local one started
for the run by default, or the cluster at `--ray ADDRESS` ("auto": the one this machine
belongs to). The command runs where the campaign directory DIR is, as the driver.

A local Ray listens on loopback only, reports no usage, authenticates with a token of the
run's own and keeps its files in a registered run's directory (local_ray.py, which says
where in Ray's source each of these is decided); at the end its logs are copied to
DIR/ray-logs and the rest is removed. The addresses, files and authentication of a
cluster at `--ray ADDRESS` are its owner's.

    driver (mallory fuzz)            the learner actor (hub.py)          worker actors (workers.py)
    ─────────────────────            ─────────────────────────           ──────────────────────────
    DIR on this machine              on the driver's machine, so it      anywhere (SPREAD over the
    starts the actors, waits         writes DIR itself; named            machines); each brings up
    for the workers, replaces        `mallory-learner-<id>`,             its own cluster there (netns:
    dead ones, cleans after          restarted by Ray after a death      root on that machine) and
    them, shows the merged           (LEARNER_RESTARTS), restoring       runs the loop against the
    counters                         from DIR/learner                    learner (remote.py)

Faults of the engine itself:

- A worker that dies (its process or its machine) ends only itself: its schedule in flight
  is lost, its learning is not (every finished schedule is in the learner's checkpoint).
  The driver forgets its trajectory (`LearnerHub.worker_gone`), removes what its cluster
  left on its machine with a task pinned there (`workers.clean_dead_run`: only a stale run,
  the registry's journal), and starts a replacement under the same name (its directory
  continues) while time remains, at most MAX_REPLACEMENTS times per worker. A worker whose
  machine is gone has nothing to clean (the machine took its namespaces with it).
- The learner actor that dies is restarted by Ray on the driver's machine, from DIR's
  checkpoint (hub.py says what it loses). Meanwhile the workers decide from their copies
  of the policy (remote.py); nothing waits for it.
- Not detached: the actors belong to the driver, so a driver killed with -9 takes them
  with it (Ray ends an owner's actors; a local Ray's processes die with the driver);
  `mallory cleanup` on each machine then removes the clusters (and, on the driver's, what
  is left of a local Ray: its run), and `--resume DIR` continues.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray._private import ray_constants
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.hub import LearnerHub
from mallory.campaign.live import CampaignRefused
from mallory.campaign.local_ray import LOGS, LocalRay, environment_set
from mallory.campaign.progress import Progress
from mallory.campaign.remote import BUDGET_SHARE, LearnerUnreachable, RemoteLearner
from mallory.campaign.workers import (
    WorkerSummary,
    calibrate_worker,
    clean_dead_run,
    run_worker,
    worker_directory,
    worker_name,
    worker_seed,
)
from mallory.errors import MalloryError

log = logging.getLogger(__name__)

#: the Ray namespace of Mallory's named actors
NAMESPACE = "mallory"
#: how often Ray restarts a dead learner actor before the campaign gives up on it
LEARNER_RESTARTS = 10
#: how often a dead worker is replaced (per worker name) before its slot stays empty
MAX_REPLACEMENTS = 3
#: how long the driver waits for a call that is not a step's decision
CALL_TIMEOUT_S = 60.0


def ray_error_text(exc: BaseException) -> str:
    """One line saying what a Ray call's failure was: for a method that raised, the
    exception it raised (a RayTaskError's own text is the remote traceback), else the
    last line of Ray's message."""
    if isinstance(exc, RayTaskError) and exc.cause is not None:
        cause = exc.cause
        return f"{type(cause).__name__}: {cause}".strip().splitlines()[0]
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


class RayLink:
    """A `HubLink` to the learner actor. A call that times out still runs on the actor
    later; Ray runs one caller's calls to an actor in the order they were made."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        ref = getattr(self.hub, method).remote(*args)
        try:
            return ray.get(ref, timeout=timeout_s)
        except GetTimeoutError:
            raise LearnerUnreachable(f"no answer to {method} within {timeout_s * 1e3:.0f} ms") from None
        except RayActorError as exc:  # dead, restarting, or its machine unreachable
            raise LearnerUnreachable(f"{method}: the learner actor is down ({type(exc).__name__})") from None
        except RayError as exc:  # the hub raised (RayTaskError: e.g. it cannot write DIR), or Ray lost the
            # answer: the hub could not take the call, which costs the call's lesson, not the worker (remote.py)
            raise LearnerUnreachable(f"{method}: the learner failed ({ray_error_text(exc)})") from None


def _logging() -> None:
    """A worker's log lines (Ray hands them to the driver's stderr), at info."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")


class WorkerActor:
    """One campaign worker, in a Ray actor process on some machine of the cluster."""

    def __init__(self, root: str, worker: str, config: CampaignConfig, run_name: str) -> None:
        _logging()
        self.root = Path(root)
        self.worker = worker
        self.config = config
        self.run_name = run_name
        self.stopping = threading.Event()

    def node(self) -> str:
        """The Ray node (machine) this worker runs on."""
        return ray.get_runtime_context().get_node_id()

    def calibrate(self) -> CampaignConfig:
        return calibrate_worker(self.root, self.worker, self.config, self.run_name)

    def run(self, hub: Any, config: CampaignConfig, seconds: float | None) -> WorkerSummary:
        """Run the worker until `seconds` have passed, the learner grants no more schedules
        or `stop` is called. `config`: the campaign's as it is now (calibrated)."""
        local = worker_directory(self.root, self.worker, config)
        service = RemoteLearner(RayLink(hub), local, budget_s=config.window_s * BUDGET_SHARE,
                                seed=worker_seed(config.seed, self.worker))
        return run_worker(self.root, self.worker, config, self.run_name, service, seconds=seconds,
                          stop=self.stopping.is_set)

    def stop(self) -> None:
        """End after the current step (called while `run` runs: the actor takes two calls
        at once)."""
        self.stopping.set()


#: the actor classes and the cleanup task (Ray wraps them once; options per use)
WORKER_ACTOR = ray.remote(WorkerActor)
HUB_ACTOR = ray.remote(LearnerHub)
CLEAN_TASK = ray.remote(clean_dead_run)


@dataclass
class DistributedResult:
    """What the campaign did: the merged counters, each worker incarnation's summary, the
    workers that died (name and why)."""

    progress: Progress
    workers: list[WorkerSummary] = field(default_factory=list)
    deaths: list[tuple[str, str]] = field(default_factory=list)


def campaign_id(root: Path) -> str:
    """A short name for the campaign in DIR, the same for every incarnation (actor names)."""
    return hashlib.blake2b(str(Path(root).resolve()).encode(), digest_size=4).hexdigest()


class _Driver:
    def __init__(self, directory: CampaignDir, config: CampaignConfig, workers: int, seconds: float | None,
                 schedules: int | None, stop: Callable[[], bool], on_update: Callable[[Progress], None]) -> None:
        self.dir = directory
        self.config = config
        self.count = workers
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.schedules = schedules
        self.stop = stop
        self.on_update = on_update
        self.id = campaign_id(directory.root)
        self.node = ray.get_runtime_context().get_node_id()
        self.actors: dict[str, Any] = {}
        self.runs: dict[str, str] = {}  # worker -> its cluster run's name
        self.nodes: dict[str, str] = {}  # worker -> its Ray node
        self.replaced: dict[str, int] = {}
        self.pending: dict[Any, str] = {}  # run() reference -> worker
        self.hub: Any = None
        self.result = DistributedResult(Progress())

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def start_worker(self, worker: str, config: CampaignConfig) -> Any:
        run_name = f"fz{secrets.token_hex(3)}-{worker}"
        actor = WORKER_ACTOR.options(
            name=f"mallory-{self.id}-{worker}-{self.replaced.get(worker, 0)}", namespace=NAMESPACE,
            num_cpus=0, max_concurrency=2, max_restarts=0, scheduling_strategy="SPREAD",
        ).remote(str(self.dir.root), worker, config, run_name)
        self.actors[worker], self.runs[worker] = actor, run_name
        self.nodes[worker] = ray.get(actor.node.remote(), timeout=CALL_TIMEOUT_S)
        return actor

    def start_hub(self) -> None:
        """Start the learner actor and wait until it holds the campaign: a hub that cannot
        (a corrupt checkpoint, DIR not writable, another driver's hub of this DIR on the
        cluster) ends the campaign here, instead of workers that learn nothing."""
        done = self.dir.schedules_done()
        try:
            self.hub = HUB_ACTOR.options(
                name=f"mallory-learner-{self.id}", namespace=NAMESPACE, num_cpus=0,
                max_restarts=LEARNER_RESTARTS, max_task_retries=0,
                # on the driver's machine: it writes the campaign directory there
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=self.node, soft=False),
            ).remote(str(self.dir.root), None if self.schedules is None else done + self.schedules)
            ray.get(self.hub.counters.remote(), timeout=CALL_TIMEOUT_S)
        except (RayError, ValueError) as exc:  # ActorAlreadyExistsError is a ValueError
            raise MalloryError(f"the learner actor could not start: {ray_error_text(exc)}") from None

    def run(self) -> DistributedResult:
        names = [worker_name(k) for k in range(self.count)]
        for worker in names:
            try:
                self.start_worker(worker, self.config)
            except RayError as exc:
                raise MalloryError(f"worker {worker} could not start: {ray_error_text(exc)}") from None
        if self.config.calibrate and self.dir.load_learner() is None and self.config.calibration is None:
            log.info("calibrating on worker %s's cluster", names[0])
            try:
                self.config = ray.get(self.actors[names[0]].calibrate.remote())
            except RayError as exc:
                raise MalloryError(f"calibration on worker {names[0]}'s cluster failed: {ray_error_text(exc)}") from None
            self.dir.write_config(self.config)
        self.start_hub()
        if not self.stop():  # a Ctrl-C during the calibration: no worker brings its cluster up
            for worker in names:
                self.pending[self.actors[worker].run.remote(self.hub, self.config, self.seconds_left())] = worker
        stopping = False
        shown = 0.0
        while self.pending:
            if not stopping and self.stop():
                stopping = True
                for actor in self.actors.values():
                    actor.stop.remote()
            ready, _ = ray.wait(list(self.pending), timeout=1.0)
            for ref in ready:
                self._finished(ref, stopping)
            if time.monotonic() - shown >= 2.0:
                shown = time.monotonic()
                self._show()
        self._close_hub()
        if not self.result.workers and self.result.deaths:
            raise MalloryError(f"every worker died; the last: {self.result.deaths[-1][1]}")
        return self.result

    def _finished(self, ref: Any, stopping: bool) -> None:
        worker = self.pending.pop(ref)
        try:
            self.result.workers.append(ray.get(ref))
            return
        except RayError as exc:  # the actor died, or run() raised (e.g. its mediator died)
            if isinstance(exc, RayTaskError) and isinstance(exc.cause, CampaignRefused):
                # the SUT refuses the campaign: a replacement's cluster would too (the driver's
                # abort ends the other workers and cleans their clusters)
                raise CampaignRefused(str(exc.cause)) from None
            why = ray_error_text(exc)
        log.warning("worker %s died (%s): its schedule in flight is lost, its learning is not", worker, why)
        self.result.deaths.append((worker, why))
        self._kill(worker)  # a worker whose run() raised is still alive: its run must go stale before it is cleaned
        self._clean_after([worker])
        self._tell_hub("worker_gone", worker)
        left = self.seconds_left()
        if stopping or (left is not None and left <= 0) or self.replaced.get(worker, 0) >= MAX_REPLACEMENTS:
            return
        self.replaced[worker] = self.replaced.get(worker, 0) + 1
        try:
            actor = self.start_worker(worker, self.config)
        except RayError as exc:
            log.warning("worker %s could not be replaced (%s)", worker, ray_error_text(exc))
            return
        log.info("worker %s replaced (%d of %d)", worker, self.replaced[worker], MAX_REPLACEMENTS)
        self.pending[actor.run.remote(self.hub, self.config, self.seconds_left())] = worker

    def _kill(self, worker: str) -> None:
        try:
            ray.kill(self.actors[worker])
        except (RayError, ValueError):
            pass  # already gone

    def _clean_after(self, workers: list[str]) -> None:
        """Remove the dead workers' clusters, each on its machine (a task pinned there; the
        tasks run side by side)."""
        cleaning = {}
        for worker in workers:
            node = self.nodes.get(worker)
            if node is None:  # it never started: no cluster
                continue
            clean = CLEAN_TASK.options(num_cpus=0, max_retries=0,
                                       scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
            cleaning[worker] = clean.remote(self.runs[worker])
        deadline = time.monotonic() + CALL_TIMEOUT_S
        for worker, ref in cleaning.items():
            run = self.runs[worker]
            try:
                removed = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                log.info("worker %s's run %s cleaned: %d things removed", worker, run, len(removed))
            except RayError as exc:  # GetTimeoutError is one
                log.warning("worker %s's run %s could not be cleaned on its machine (%s): there, `mallory cleanup %s`",
                            worker, run, ray_error_text(exc), run)

    def abort(self) -> None:
        """The driver is leaving before its workers ended (a second Ctrl-C, an error): end
        every worker now and remove its cluster on its machine (a worker killed by
        ray.shutdown would leave its cluster behind), then the merged stats' last version."""
        workers = list(self.actors)
        for worker in workers:
            self._kill(worker)
        self._clean_after(workers)
        if self.hub is not None:
            self._close_hub()

    def _tell_hub(self, method: str, *args: Any) -> Any:
        try:
            return RayLink(self.hub).call(method, *args, timeout_s=CALL_TIMEOUT_S)
        except LearnerUnreachable as exc:
            log.warning("%s", exc)
            return None

    def _show(self) -> None:
        progress = self._tell_hub("progress_now")
        if progress is not None:
            self.result.progress = progress
            self.on_update(progress)

    def _close_hub(self) -> None:
        self._tell_hub("close")
        self._show()


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Keep this process's SIGINT and SIGTERM handlers through what runs inside: ray.init
    replaces SIGTERM's with one that exits at once (sys.exit), where `mallory fuzz` stops
    after the current step as on Ctrl-C."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for s, handler in kept.items():
                if handler is not None:  # None: a handler not installed from Python
                    signal.signal(s, handler)


@contextmanager
def node_address_on_loopback() -> Iterator[None]:
    """While a local Ray's node starts in this process: Ray takes this machine's address
    from its interface to the outside unless ENABLE_RAY_CLUSTER is false, which it read
    from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it was imported, before the driver could
    set that variable (local_ray.py says where in Ray)."""
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def check_on_loopback() -> None:
    """MalloryError unless the local Ray's node took a loopback address, which every one of
    its listeners follows (a Ray whose address selection changed would listen outside)."""
    address = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(address.strip("[]")).is_loopback:
        raise MalloryError(f"the local Ray took the address {address}, not loopback: its listeners would be "
                           "reachable from other machines (this Ray's node-address selection is not the one "
                           "mallory/campaign/local_ray.py describes)")


def run_on_ray(directory: CampaignDir, config: CampaignConfig, *, workers: int, address: str | None,
               seconds: float | None, schedules: int | None, stop: Callable[[], bool],
               on_update: Callable[[Progress], None]) -> DistributedResult:
    """Run the campaign in `directory` (created, or resumed) with `workers` workers on the
    Ray cluster at `address` (None: a local one, started for the run and stopped after),
    for `seconds` more (None: no deadline) or until `schedules` more are done in all, or
    `stop()`. Whatever happens, nothing of it is left running: the workers and their
    clusters, and a local Ray with its processes and files (its logs are copied to
    DIR/ray-logs first)."""
    # No runtime_env: it needs ray[default]. The actors' processes run the Python of each
    # machine's raylet, which has Mallory installed (docs/ray.md); a local Ray started here
    # inherits this process's environment (its venv, MALLORY_* settings, and those of
    # LocalRay.environment) and its user (root).
    # The actors get DIR as an absolute path: their working directory is not this one's.
    directory = CampaignDir(directory.root.resolve())
    local = LocalRay.open() if address is None else None
    try:
        with environment_set(local.environment()) if local else nullcontext():
            try:
                _join_ray(address, local)
                driver = _Driver(directory, config, workers, seconds, schedules, stop, on_update)
                try:
                    return driver.run()
                except BaseException:
                    try:
                        driver.abort()
                    except Exception as exc:  # noqa: BLE001 - the first failure is the one to report
                        log.warning("the workers could not all be ended (%s): `mallory cleanup` on their machines", exc)
                    raise
            finally:
                ray.shutdown()
    finally:
        if local is not None:
            local.close(logs_to=directory.root / LOGS)


def _join_ray(address: str | None, local: LocalRay | None) -> None:
    """Start the local Ray `local` describes (address None), or join the cluster at
    `address`: its addresses, files and authentication are its owner's (docs/ray.md)."""
    try:
        with signal_handlers_kept(), node_address_on_loopback() if local else nullcontext():
            ray.init(address=address or "local", namespace=NAMESPACE, log_to_driver=True, configure_logging=False,
                     **(local.init_options() if local else {"include_dashboard": False}))
    except (ConnectionError, RuntimeError, ValueError, OSError, RayError) as exc:  # RayError: AuthenticationError
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise MalloryError(f"--ray: cannot start or join {where}: {exc}") from None
    if local is not None:
        check_on_loopback()
