"""The driver of `mallory fuzz --workers` (ray_engine.py) without Ray: a named fake of the few
Ray calls it makes runs actors and tasks in this process, each call at once; the workers
are fakes that bring nothing up, the learner actor a real LearnerHub. The local Ray's
place (local_ray.py) is real: a run registered under short temporary state and data roots.
What Ray itself does (processes, listeners, restarts, scheduling) is tests/live/ray's."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray")

from ray.exceptions import (  # noqa: E402
    ActorDiedError,
    AuthenticationError,
    GetTimeoutError,
    RayTaskError,
)

from mallory.campaign import ray_engine  # noqa: E402
from mallory.campaign.config import CampaignConfig  # noqa: E402
from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.campaign.hub import LearnerHub  # noqa: E402
from mallory.campaign.live import CampaignRefused  # noqa: E402
from mallory.campaign.remote import LearnerUnreachable  # noqa: E402
from mallory.campaign.workers import WorkerSummary, worker_seed  # noqa: E402
from mallory.cluster.registry import list_runs, proc_state, run_status  # noqa: E402
from mallory.errors import MalloryError  # noqa: E402

CONFIG = CampaignConfig(sut="fake", seed=3, steps=2, calibrate=0)
DRIVER_NODE = "d" * 56  # Ray's node ids are 28 bytes in hex


def node_of(worker: str) -> str:
    """The (fake) machine a worker lands on."""
    return hashlib.sha256(worker.encode()).hexdigest()[:56]


class FakeRef:
    """A call's outcome, known at once: its value, or the exception ray.get raises."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


def remote_error(exc: Exception) -> BaseException:
    """What ray.get raises for a method that raised `exc` (ActorDiedError: the process died)."""
    if isinstance(exc, ActorDiedError):
        return exc
    return RayTaskError("fake", f"Traceback (fake)\n{exc!r}", exc, proctitle="fake", pid=1,
                        ip="127.0.0.1").as_instanceof_cause()


class FakeHandle:
    def __init__(self, ray: FakeRay, make: Any, args: tuple, options: dict[str, Any]) -> None:
        self.ray, self.options, self.dead = ray, options, False
        try:
            self.instance, self.init_error = make(*args), None
        except Exception as exc:  # noqa: BLE001 - a creation task that raised: every call fails
            self.instance, self.init_error = None, exc

    def __getattr__(self, method: str) -> Any:
        handle = self

        class Method:
            @staticmethod
            def remote(*args: Any) -> FakeRef:
                handle.ray.calls.append((handle.options.get("name"), method))
                if handle.dead or handle.init_error is not None:
                    return FakeRef(error=ActorDiedError())
                try:
                    return FakeRef(getattr(handle.instance, method)(*args))
                except Exception as exc:  # noqa: BLE001 - it travels in the ref, as Ray's does
                    return FakeRef(error=remote_error(exc))

        return Method


class FakeRemote:
    """ray.remote(cls or function) as the driver uses it: .options(...).remote(*args)."""

    def __init__(self, ray: FakeRay, target: Any, kind: str) -> None:
        self.ray, self.target, self.kind = ray, target, kind

    def options(self, **options: Any) -> Any:
        outer = self

        class Bound:
            @staticmethod
            def remote(*args: Any) -> Any:
                if outer.kind == "actor":
                    handle = FakeHandle(outer.ray, outer.target, args, options)
                    outer.ray.actors.append(handle)
                    return handle
                outer.ray.tasks.append((options["scheduling_strategy"].node_id, args))
                try:
                    return FakeRef(outer.target(*args))
                except Exception as exc:  # noqa: BLE001
                    return FakeRef(error=remote_error(exc))

        return Bound


class FakeRay:
    """The `ray` module as ray_engine.py calls it, in this process; it records what it did.
    A local Ray's init leaves what a real one would in its temp dir (a session's logs and
    sockets) and a process naming it that outlives shutdown (a worker the raylet left)."""

    def __init__(self, constants: SimpleNamespace, *, interrupt_wait: bool = False) -> None:
        self.constants = constants  # ray._private.ray_constants, as ray_engine sees it
        self.actors: list[FakeHandle] = []
        self.tasks: list[tuple[str, tuple]] = []
        self.calls: list[tuple[str | None, str]] = []
        self.killed: list[str] = []
        self.events: list[str] = []
        self.interrupt_wait = interrupt_wait
        self.sigterm_in_wait: Any = None
        self.init_kwargs: dict[str, Any] = {}
        self.init_environment: dict[str, str] = {}
        self.init_enable_ray_cluster: bool | None = None
        self.init_error: Exception | None = None
        self.node_address = "127.0.0.1"
        self.leftover: subprocess.Popen | None = None
        self.util = SimpleNamespace(get_node_ip_address=lambda: self.node_address)

    def init(self, **kwargs: Any) -> None:
        self.events.append("init")
        self.init_kwargs = kwargs
        self.init_environment = dict(os.environ)
        self.init_enable_ray_cluster = self.constants.ENABLE_RAY_CLUSTER
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init does
        if self.init_error is not None:
            raise self.init_error
        if "_temp_dir" in kwargs:
            session = Path(kwargs["_temp_dir"]) / "session_2026-01-01_00-00-00_000000_1"
            (session / "logs").mkdir(parents=True)
            (session / "sockets").mkdir()
            (session / "logs" / "raylet.out").write_text("raylet started\n")
            self.leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                              f"--temp-dir={kwargs['_temp_dir']}"])

    def shutdown(self) -> None:
        self.events.append("shutdown")

    def get(self, ref: FakeRef, timeout: float | None = None) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs: list[FakeRef], timeout: float | None = None) -> tuple[list[FakeRef], list[FakeRef]]:
        self.sigterm_in_wait = signal.getsignal(signal.SIGTERM)
        if self.interrupt_wait:
            raise KeyboardInterrupt
        return refs[:1], refs[1:]

    def kill(self, handle: FakeHandle) -> None:
        handle.dead = True
        self.killed.append(handle.options["name"])

    def get_runtime_context(self) -> Any:
        class Context:
            @staticmethod
            def get_node_id() -> str:
                return DRIVER_NODE

        return Context


class FakeWorker:
    """A worker actor that brings nothing up: each incarnation's run() takes the next of
    OUTCOMES[worker] (a summary, or an exception to raise), default a summary."""

    OUTCOMES: dict[str, list[Exception | None]] = {}

    def __init__(self, root: str, worker: str, config: CampaignConfig, run_name: str) -> None:
        self.worker, self.config = worker, config

    def node(self) -> str:
        return node_of(self.worker)

    def calibrate(self) -> CampaignConfig:
        return self.config

    def run(self, hub: Any, config: CampaignConfig, seconds: float | None) -> WorkerSummary:
        outcomes = self.OUTCOMES.get(self.worker, [])
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        return WorkerSummary(self.worker, 1, 2, 0, 1.0, 2.0)

    def stop(self) -> None:
        pass


@pytest.fixture
def roots(monkeypatch) -> Any:
    """Short state and data roots of their own (Ray's socket paths must fit in 107 bytes;
    tmp_path's are too long)."""
    base = Path(tempfile.mkdtemp(prefix="mr", dir="/tmp"))
    monkeypatch.setenv("MALLORY_STATE_DIR", str(base / "s"))
    monkeypatch.setenv("MALLORY_DATA_ROOT", str(base / "d"))
    yield SimpleNamespace(state=base / "s", data=base / "d")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fake_ray(monkeypatch, roots) -> Any:
    constants = SimpleNamespace(ENABLE_RAY_CLUSTER=True)
    fake = FakeRay(constants)
    monkeypatch.setattr(ray_engine, "ray", fake)
    monkeypatch.setattr(ray_engine, "ray_constants", constants)
    monkeypatch.setattr(ray_engine, "WORKER_ACTOR", FakeRemote(fake, FakeWorker, "actor"))
    monkeypatch.setattr(ray_engine, "HUB_ACTOR", FakeRemote(fake, LearnerHub, "actor"))
    monkeypatch.setattr(ray_engine, "CLEAN_TASK", FakeRemote(fake, lambda run: [f"cleaned {run}"], "task"))
    monkeypatch.setattr(FakeWorker, "OUTCOMES", {})
    yield fake
    if fake.leftover is not None:
        fake.leftover.kill()
        fake.leftover.wait()


def campaign(tmp_path: Path) -> CampaignDir:
    directory = CampaignDir(tmp_path / "c")
    directory.create(CONFIG)
    return directory


def run(directory: CampaignDir, workers: int = 2, stop=lambda: False) -> ray_engine.DistributedResult:
    return ray_engine.run_on_ray(directory, CONFIG, workers=workers, address=None, seconds=None, schedules=None,
                                 stop=stop, on_update=lambda progress: None)


def test_a_worker_that_dies_is_killed_cleaned_on_its_machine_forgotten_and_replaced(fake_ray, tmp_path):
    FakeWorker.OUTCOMES = {"w1": [ActorDiedError()]}
    result = run(campaign(tmp_path))
    assert [death[0] for death in result.deaths] == ["w1"]
    assert sorted(s.worker for s in result.workers) == ["w0", "w1"], "the replacement ran"
    first_w1 = next(h for h in fake_ray.actors if h.options.get("name", "").endswith("-w1-0"))
    assert first_w1.options["name"] in fake_ray.killed
    ((node, (run_name,)),) = fake_ray.tasks
    assert node == node_of("w1") and run_name.endswith("-w1"), "cleaned on the dead worker's machine"
    hub_calls = [method for name, method in fake_ray.calls if name and "learner" in name]
    assert "worker_gone" in hub_calls and hub_calls[-2:] == ["close", "progress_now"]
    assert fake_ray.events == ["init", "shutdown"]


@pytest.mark.parametrize("ending", ["stop", "deadline"])
def test_a_worker_that_dies_as_the_campaign_ends_is_cleaned_but_not_replaced(fake_ray, tmp_path, ending):
    """A Ctrl-C (stop) is passed to every worker; a worker dying then, or once the campaign's
    time is up, leaves its slot empty."""
    FakeWorker.OUTCOMES = {"w1": [ActorDiedError()]}
    asked = []

    def stop() -> bool:  # false while the workers start, then the user's Ctrl-C
        asked.append(True)
        return ending == "stop" and len(asked) > 1

    result = ray_engine.run_on_ray(campaign(tmp_path), CONFIG, workers=2, address=None,
                                   seconds=0.0 if ending == "deadline" else None, schedules=None, stop=stop,
                                   on_update=lambda progress: None)
    assert [death[0] for death in result.deaths] == ["w1"] and [s.worker for s in result.workers] == ["w0"]
    names = [h.options["name"] for h in fake_ray.actors if "learner" not in h.options["name"]]
    assert sorted(name.rsplit("-", 2)[1] for name in names) == ["w0", "w1"], "no replacement"
    assert [node for node, _ in fake_ray.tasks] == [node_of("w1")], "cleaned all the same"
    stopped = sorted(name for name, method in fake_ray.calls if method == "stop")
    assert stopped == (sorted(names) if ending == "stop" else [])


def test_the_learner_actor_lives_on_the_drivers_machine_and_is_restarted_and_workers_take_a_stop_while_running(
        fake_ray, tmp_path):
    run(campaign(tmp_path))
    (hub,) = [h for h in fake_ray.actors if isinstance(h.instance, LearnerHub)]
    strategy = hub.options["scheduling_strategy"]
    assert strategy.node_id == DRIVER_NODE and strategy.soft is False, "it writes DIR on the driver's machine"
    assert hub.options["max_restarts"] >= 1 and hub.options["max_task_retries"] == 0
    workers = [h for h in fake_ray.actors if isinstance(h.instance, FakeWorker)]
    assert workers and all(h.options["max_concurrency"] >= 2 and h.options["max_restarts"] == 0 for h in workers)


def test_a_resumed_campaign_counts_its_schedules_done_and_shows_the_merged_counters(fake_ray, tmp_path):
    """--resume with --schedules N: the hub grants N more than DIR holds; the driver's
    result and its updates are the hub's merged counters (here the 2 schedules done)."""
    directory = campaign(tmp_path)
    for index in range(2):
        directory.write_schedule(index, {"index": index, "steps": [{"action": "noop"}]})
    updates = []
    result = ray_engine.run_on_ray(directory, CONFIG, workers=1, address=None, seconds=None, schedules=3,
                                   stop=lambda: False, on_update=updates.append)
    (hub,) = [h.instance for h in fake_ray.actors if isinstance(h.instance, LearnerHub)]
    assert hub.limit == 5
    assert result.progress.schedules_done == 2 and result.progress.steps_done == 2
    assert updates and updates[-1].schedules_done == 2


def test_a_calibrated_configuration_is_written_and_given_to_every_worker(fake_ray, tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "calibrate", lambda self: replace(self.config, threshold=0.42))
    given = []
    run_one = FakeWorker.run
    monkeypatch.setattr(FakeWorker, "run", lambda self, hub, config, seconds: (given.append(config.threshold),
                                                                               run_one(self, hub, config, seconds))[1])
    directory = CampaignDir(tmp_path / "c")
    directory.create(CampaignConfig(sut="fake", seed=3, steps=2, calibrate=20))
    ray_engine.run_on_ray(directory, directory.config(), workers=2, address=None, seconds=None, schedules=None,
                          stop=lambda: False, on_update=lambda progress: None)
    assert directory.config().threshold == 0.42 and given == [0.42, 0.42]


def test_a_worker_actor_runs_its_loop_with_a_tenth_of_the_window_to_decide_its_own_seed_and_its_stop(
        tmp_path, monkeypatch):
    """The real WorkerActor (the other tests' workers are fakes) around a fake run_worker."""
    seen = {}

    def run_worker(root, worker, config, run_name, service, *, seconds, stop):
        seen.update(root=root, worker=worker, run_name=run_name, service=service, seconds=seconds, stop=stop)
        return "summary"

    monkeypatch.setattr(ray_engine, "run_worker", run_worker)
    monkeypatch.setattr(ray_engine, "_logging", lambda: None)
    config = CampaignConfig(sut="fake", seed=3, steps=2, window_s=4.0)
    CampaignDir(tmp_path / "c").create(config)
    actor = ray_engine.WorkerActor(str(tmp_path / "c"), "w1", config, "fzabc-w1")
    hub = object()
    assert actor.run(hub, config, 30.0) == "summary"
    service = seen["service"]
    assert (seen["root"], seen["worker"], seen["run_name"], seen["seconds"]) == (tmp_path / "c", "w1", "fzabc-w1", 30.0)
    assert isinstance(service.link, ray_engine.RayLink) and service.link.hub is hub
    assert service.budget_s == pytest.approx(0.4), "a tenth of the window"
    assert service.rng.random() == random.Random(worker_seed(3, "w1")).random() != random.Random(3).random()
    assert service.local.root == tmp_path / "c" / "workers" / "w1"
    assert not seen["stop"]()
    actor.stop()
    assert seen["stop"](), "the driver's stop reaches the running loop"


def test_a_worker_whose_run_raised_is_reported_in_one_line(fake_ray, tmp_path):
    FakeWorker.OUTCOMES = {"w0": [MalloryError("the mediator died")]}
    result = run(campaign(tmp_path), workers=1)
    assert result.deaths == [("w0", "MalloryError: the mediator died")]
    assert [s.worker for s in result.workers] == ["w0"]


def test_every_worker_dead_is_an_error(fake_ray, tmp_path):
    FakeWorker.OUTCOMES = {"w0": [MalloryError("no root")] * (1 + ray_engine.MAX_REPLACEMENTS)}
    with pytest.raises(MalloryError, match="every worker died; the last: MalloryError: no root"):
        run(campaign(tmp_path), workers=1)
    assert [method for _, method in fake_ray.calls].count("run") == 1 + ray_engine.MAX_REPLACEMENTS
    assert fake_ray.events == ["init", "shutdown"]


def test_a_campaign_the_sut_refuses_ends_at_the_first_refusal_without_replacements(fake_ray, tmp_path):
    # (a sampler policy whose fault the SUT cannot take: live.check_sampler_fault)
    FakeWorker.OUTCOMES = {"w0": [CampaignRefused("--policy rounds takes rounds:lossy-sync, which fake cannot: no")]}
    with pytest.raises(CampaignRefused, match=r"^--policy rounds takes rounds:lossy-sync, which fake cannot: no$"):
        run(campaign(tmp_path))
    assert len([h for h in fake_ray.actors if "learner" not in h.options["name"]]) == 2, "no replacement"
    assert sorted(node for node, _ in fake_ray.tasks) == sorted([node_of("w0"), node_of("w1")]), "both cleaned"
    assert fake_ray.events == ["init", "shutdown"]


def test_an_interrupted_driver_kills_every_worker_and_cleans_each_cluster(fake_ray, tmp_path):
    fake_ray.interrupt_wait = True  # a second Ctrl-C while the workers run
    with pytest.raises(KeyboardInterrupt):
        run(campaign(tmp_path))
    assert sorted(fake_ray.killed) == sorted(h.options["name"] for h in fake_ray.actors if "learner" not in h.options["name"])
    assert sorted(node for node, _ in fake_ray.tasks) == sorted([node_of("w0"), node_of("w1")])
    assert "close" in [method for name, method in fake_ray.calls if name and "learner" in name], "last merged stats"
    assert fake_ray.events == ["init", "shutdown"], "the local Ray is stopped after the workers are"


def test_an_interrupted_calibration_cleans_the_calibrating_workers_cluster(fake_ray, tmp_path, monkeypatch):
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(FakeWorker, "calibrate", interrupted)
    directory = CampaignDir(tmp_path / "c")
    directory.create(CampaignConfig(sut="fake", seed=3, steps=2, calibrate=20))
    with pytest.raises(KeyboardInterrupt):
        ray_engine.run_on_ray(directory, directory.config(), workers=2, address=None, seconds=None, schedules=None,
                              stop=lambda: False, on_update=lambda progress: None)
    assert node_of("w0") in {node for node, _ in fake_ray.tasks}
    assert fake_ray.events[-1] == "shutdown"


def test_a_stop_before_the_workers_start_starts_no_worker_run(fake_ray, tmp_path):
    result = run(campaign(tmp_path), stop=lambda: True)
    assert not result.workers and not result.deaths
    assert not [method for _, method in fake_ray.calls if method == "run"]


def test_sigterm_keeps_mallorys_handler_through_ray_init(fake_ray, tmp_path):
    def ours(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        run(campaign(tmp_path))
        assert fake_ray.sigterm_in_wait is ours, "ray.init's handler would exit at once instead of stopping"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_learner_actor_that_cannot_start_ends_the_campaign_before_any_worker_runs(fake_ray, tmp_path):
    directory = campaign(tmp_path)
    directory.save_learner(b"not a checkpoint")
    with pytest.raises(MalloryError, match="the learner actor could not start"):
        run(directory)
    assert not [method for _, method in fake_ray.calls if method == "run"]
    assert fake_ray.events == ["init", "shutdown"]


def test_the_actors_get_the_campaign_directory_as_an_absolute_path(fake_ray, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    CampaignDir(Path("rel")).create(CONFIG)
    run(CampaignDir(Path("rel")))
    roots = {h.instance.dir.root for h in fake_ray.actors if isinstance(h.instance, LearnerHub)}
    assert roots == {(tmp_path / "rel").resolve()}


@pytest.mark.parametrize("error, says", [
    (GetTimeoutError("late"), "no answer to decide within 150 ms"),
    (ActorDiedError(), "the learner actor is down (ActorDiedError)"),
    (remote_error(OSError(28, "No space left on device")), "the learner failed (OSError: [Errno 28] No space left"),
])
def test_a_hub_call_that_fails_in_any_way_is_the_learner_unreachable(fake_ray, error, says):
    class Hub:
        class decide:  # noqa: N801 - a method's name, as the handle's attribute
            @staticmethod
            def remote(*args: Any) -> FakeRef:
                return FakeRef(error=error)

    with pytest.raises(LearnerUnreachable) as raised:
        ray_engine.RayLink(Hub()).call("decide", "w0", ["noop"], timeout_s=0.15)
    assert says in str(raised.value)



def test_a_local_ray_imports_the_mallory_the_driver_runs(fake_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    run(campaign(tmp_path))
    tree = str(Path(ray_engine.__file__).resolve().parent.parent.parent)
    assert fake_ray.init_environment["PYTHONPATH"] == os.pathsep.join([tree, "/elsewhere"])
    assert os.environ["PYTHONPATH"] == "/elsewhere", "the driver's own environment is left as it was"


def ray_runs(roots: Any) -> list[Any]:
    return [record for record in list_runs(roots.state) if record.name.startswith("ray-")]


def data_left(roots: Any) -> list[Path]:
    return list(roots.data.iterdir()) if roots.data.exists() else []


def test_a_local_ray_listens_on_loopback_reports_nothing_and_has_the_runs_token_and_directory(
        fake_ray, roots, tmp_path):
    before = dict(os.environ)
    run(campaign(tmp_path))
    kwargs, env = fake_ray.init_kwargs, fake_ray.init_environment
    assert kwargs["address"] == "local"
    assert kwargs["_node_ip_address"] == "127.0.0.1" and kwargs["dashboard_host"] == "127.0.0.1"
    assert kwargs["include_dashboard"] is False
    # Ray reads the flag when imported: the driver's copy is cleared while the node starts,
    # and the variable is there for Ray's own processes
    assert fake_ray.init_enable_ray_cluster is False and env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert ray_engine.ray_constants.ENABLE_RAY_CLUSTER is True, "restored once the node started"
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    # the run's directory: Ray's temp dir and default temp dir in the data root, the token
    # in the state root, each under the registered run's name
    temp_dir = Path(kwargs["_temp_dir"])
    (name,) = {temp_dir.parent.name}
    assert temp_dir == roots.data / name / "ray" and env["RAY_TMPDIR"] == str(roots.data / name)
    assert name.startswith("ray-") and env["RAY_AUTH_TOKEN_PATH"] == str(roots.state / name / "ray-token")
    assert os.environ == before, "the driver's environment is as it was, also what ray.init changes"


def test_the_local_rays_place_is_journaled_before_ray_starts_and_its_token_is_private(fake_ray, roots, tmp_path):
    seen: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        (record,) = ray_runs(roots)
        seen["entries"] = record.entries()
        seen["status"] = run_status(record)
        token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        seen["token"], seen["mode"] = token.read_text(), stat.S_IMODE(token.stat().st_mode)
        FakeRay.init(fake_ray, **kwargs)

    fake_ray.init = init
    run(campaign(tmp_path))
    temp_dir = fake_ray.init_kwargs["_temp_dir"]
    assert seen["entries"] == [{"uses": temp_dir}, {"dir": str(Path(temp_dir).parent)}]
    assert seen["status"] == "live", "owned by the driver: `mallory cleanup` removes it once the driver is gone"
    assert len(seen["token"]) == 64 and int(seen["token"], 16) >= 0 and seen["mode"] == 0o600


def test_after_the_run_the_local_rays_logs_are_in_the_campaign_and_nothing_else_is_left(fake_ray, roots, tmp_path):
    directory = campaign(tmp_path)
    run(directory)
    assert (directory.root / "ray-logs" / "raylet.out").read_text() == "raylet started\n"
    assert not (directory.root / "ray-logs" / "sockets").exists()
    assert proc_state(fake_ray.leftover.pid) is None, "a Ray process left after shutdown is killed (and reaped)"
    assert not ray_runs(roots) and not data_left(roots), "the run, its directory and its token are gone"


def test_a_second_run_keeps_only_the_last_local_rays_logs(fake_ray, roots, tmp_path):
    directory = campaign(tmp_path)
    (directory.root / "ray-logs").mkdir()
    (directory.root / "ray-logs" / "gcs_server.out").write_text("an earlier run's\n")
    run(directory)
    assert sorted(p.name for p in (directory.root / "ray-logs").iterdir()) == ["raylet.out"]


def test_a_local_ray_that_took_an_outside_address_ends_the_run_before_any_worker(fake_ray, roots, tmp_path):
    fake_ray.node_address = "192.0.2.2"
    with pytest.raises(MalloryError, match="took the address 192.0.2.2, not loopback"):
        run(campaign(tmp_path))
    assert not fake_ray.actors and fake_ray.events == ["init", "shutdown"]
    assert not ray_runs(roots) and proc_state(fake_ray.leftover.pid) is None


@pytest.mark.parametrize("error", [
    OSError("validate_socket_filename failed: AF_UNIX path length cannot exceed 107 bytes"),
    AuthenticationError("Token authentication is enabled but no authentication token was found"),
])
def test_a_local_ray_that_cannot_start_is_a_one_line_error_and_leaves_nothing(fake_ray, roots, tmp_path, error):
    fake_ray.init_error = error
    with pytest.raises(MalloryError, match=f"--ray: cannot start or join a local Ray: {str(error)[:20]}"):
        run(campaign(tmp_path))
    assert fake_ray.events == ["init", "shutdown"], "what it started is stopped"
    assert not ray_runs(roots) and not data_left(roots)


def test_a_data_root_too_long_for_rays_sockets_is_a_one_line_error(fake_ray, roots, tmp_path, monkeypatch):
    monkeypatch.setenv("MALLORY_DATA_ROOT", str(tmp_path / ("d" * 60)))
    with pytest.raises(MalloryError, match=r"bytes long under .* \(at most 107\): set MALLORY_DATA_ROOT"):
        run(campaign(tmp_path))
    assert not fake_ray.events and not ray_runs(roots)


def test_a_ray_cluster_given_by_address_is_joined_as_it_is(fake_ray, roots, tmp_path):
    before = dict(os.environ)
    ray_engine.run_on_ray(campaign(tmp_path), CONFIG, workers=1, address="auto", seconds=None, schedules=None,
                          stop=lambda: False, on_update=lambda progress: None)
    assert fake_ray.init_kwargs["address"] == "auto"
    assert not {"_temp_dir", "_node_ip_address", "dashboard_host"} & set(fake_ray.init_kwargs)
    assert fake_ray.init_enable_ray_cluster is True and fake_ray.init_environment == before
    assert not ray_runs(roots) and not (tmp_path / "c" / "ray-logs").exists()


def test_a_state_root_that_cannot_be_written_is_a_one_line_error(fake_ray, roots, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path / "file" / "state"))  # under a file: never writable
    with pytest.raises(MalloryError, match="a local Ray's run cannot be registered .*: run as root"):
        run(campaign(tmp_path))
    assert not fake_ray.events
