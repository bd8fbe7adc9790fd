"""The driver of `mallory fuzz --workers` (ray_engine.py) without Ray: a named fake of the few
Ray calls it makes runs actors and tasks in this process, each call at once; the workers
are fakes that bring nothing up, the learner actor a real LearnerHub. What Ray itself does
(processes, restarts, scheduling) is tests/live/ray's."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from ray.exceptions import ActorDiedError, GetTimeoutError, RayTaskError  # noqa: E402

from mallory.campaign import ray_engine  # noqa: E402
from mallory.campaign.config import CampaignConfig  # noqa: E402
from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.campaign.hub import LearnerHub  # noqa: E402
from mallory.campaign.remote import LearnerUnreachable  # noqa: E402
from mallory.campaign.workers import WorkerSummary  # noqa: E402
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
    """The `ray` module as ray_engine.py calls it, in this process; it records what it did."""

    def __init__(self, *, interrupt_wait: bool = False) -> None:
        self.actors: list[FakeHandle] = []
        self.tasks: list[tuple[str, tuple]] = []
        self.calls: list[tuple[str | None, str]] = []
        self.killed: list[str] = []
        self.events: list[str] = []
        self.interrupt_wait = interrupt_wait
        self.sigterm_in_wait: Any = None
        self.init_pythonpath: str | None = None

    def init(self, **kwargs: Any) -> None:
        self.events.append("init")
        self.init_pythonpath = os.environ.get("PYTHONPATH")
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init does

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
def fake_ray(monkeypatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(ray_engine, "ray", fake)
    monkeypatch.setattr(ray_engine, "WORKER_ACTOR", FakeRemote(fake, FakeWorker, "actor"))
    monkeypatch.setattr(ray_engine, "HUB_ACTOR", FakeRemote(fake, LearnerHub, "actor"))
    monkeypatch.setattr(ray_engine, "CLEAN_TASK", FakeRemote(fake, lambda run: [f"cleaned {run}"], "task"))
    monkeypatch.setattr(FakeWorker, "OUTCOMES", {})
    return fake


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


def test_an_interrupted_driver_kills_every_worker_and_cleans_each_cluster(fake_ray, tmp_path):
    fake_ray.interrupt_wait = True  # a second Ctrl-C while the workers run
    with pytest.raises(KeyboardInterrupt):
        run(campaign(tmp_path))
    assert sorted(fake_ray.killed) == sorted(h.options["name"] for h in fake_ray.actors if "learner" not in h.options["name"])
    assert sorted(node for node, _ in fake_ray.tasks) == sorted([node_of("w0"), node_of("w1")])
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
    assert fake_ray.init_pythonpath == os.pathsep.join([tree, "/elsewhere"])
    assert os.environ["PYTHONPATH"] == "/elsewhere", "the driver's own environment is left as it was"
