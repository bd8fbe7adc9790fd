"""Several workers, one learner, without Ray: the workers' loops (the fakes of test_loop.py)
talk to a `LearnerHub` through `RemoteLearner` and a named fake link that calls the hub in
this process, one call at a time as the Ray actor does; the link can be told to answer late
or not at all. Ray itself, and real clusters, are tests/live/ray's."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from mallory import paths
from mallory.campaign.config import CampaignConfig, LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.hub import LearnerHub
from mallory.campaign.loop import BugEvidence, Campaign, ScriptedStep
from mallory.campaign.model import bind_model, load_model
from mallory.campaign.remote import LearnerUnreachable, RemoteLearner
from mallory.campaign.service import (
    BugReport,
    LocalLearner,
    Transition,
    WindowSeen,
    learner_for,
    pack_files,
    unpack_files,
)
from mallory.campaign.workers import clean_dead_run, worker_directory, worker_seed
from mallory.cluster.registry import list_runs, register_run
from mallory.learner.learner import Learner
from mallory.mediator.windows import Window
from tests.unit.campaign.test_loop import FakeClock, FakeNemesis, FakeTimeline
from tests.unit.campaign.test_model import CATALOGUE, NODES, TracingTimeline, lock_file  # noqa: F401 (a fixture)
from tests.unit.campaign.test_modelfuzz import WINDOW_S, planned, played, read_corpus

CONFIG = CampaignConfig(sut="fake", policy="qlearning", seed=3, steps=6)
BUDGET_S = 0.25


class FakeHubLink:
    """Calls a hub in this process, one call at a time (as a Ray actor takes them).
    `unreachable`: methods that fail as a dead hub's do, without reaching it; `late`:
    methods whose answer comes after any deadline (the call still runs on the hub, as a
    call Ray delivered does). Every call is logged as (method, args), its deadline in
    `timeouts` as (method, timeout_s)."""

    lock = threading.Lock()

    def __init__(self, hub: LearnerHub, unreachable: set[str] = frozenset(), late: set[str] = frozenset()) -> None:
        self.hub = hub
        self.unreachable = set(unreachable)
        self.late = set(late)
        self.calls: list[tuple[str, tuple]] = []
        self.timeouts: list[tuple[str, float]] = []

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        self.calls.append((method, args))
        self.timeouts.append((method, timeout_s))
        if method in self.unreachable:
            raise LearnerUnreachable(f"{method}: the fake hub is down")
        with self.lock:
            answer = getattr(self.hub, method)(*args)
        if method in self.late:
            raise LearnerUnreachable(f"no answer to {method} within {timeout_s * 1e3:.0f} ms")
        return answer


class RunDirFinds:
    """A checker that finds one bug in every schedule, its evidence the schedule's run dir."""

    def __init__(self, directory: CampaignDir) -> None:
        self.dir = directory

    def begin_schedule(self, index: int) -> None:
        pass

    def faults_healed(self) -> None:
        pass

    def check_schedule(self, index: int, record: dict) -> list[BugEvidence]:
        run = self.dir.fresh_run_dir(index)
        (run / "history.edn").write_text(f"{self.dir.root.name} schedule {index}\n")
        return [BugEvidence("log:two-leaders", {"explanation": "two leaders"}, [run], {"occurrences": 1})]


def worker_campaign(root: Path, worker: str, link: FakeHubLink, checker: bool = False) -> tuple[Campaign, RemoteLearner]:
    """A worker's loop as workers.run_worker makes it, on the fakes instead of a cluster."""
    local = worker_directory(root, worker, CONFIG)
    service = RemoteLearner(link, local, budget_s=BUDGET_S, seed=worker_seed(CONFIG.seed, worker))
    clock, nemesis = FakeClock(), FakeNemesis()
    own = local.config()
    campaign = Campaign(local, service, FakeTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=own.steps, window_s=2.5, reset_s=5.0, seed=own.seed),
                        checker=RunDirFinds(local) if checker else None, sleeper=clock, worker=worker)
    return campaign, service


def new_campaign(tmp_path: Path) -> Path:
    root = tmp_path / "campaign"
    CampaignDir(root).create(CONFIG)
    return root


def run_workers(root: Path, hub: LearnerHub, workers: list[str], schedules: int, **link: Any) -> dict[str, Campaign]:
    """Each worker in a thread of its own, `schedules` schedules each, or as many as the
    hub grants."""
    campaigns = {w: worker_campaign(root, w, FakeHubLink(hub, **link), checker=True) for w in workers}
    errors: list[BaseException] = []

    def work(worker: str) -> None:
        campaign, service = campaigns[worker]
        try:
            for _ in range(schedules):
                if not service.begin_schedule(worker):
                    break
                campaign.run(schedules=1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return {w: c for w, (c, _) in campaigns.items()}


def test_both_workers_states_land_in_one_store_and_the_stats_merge(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaigns = run_workers(root, hub, ["w0", "w1"], schedules=2)
    merged = CampaignDir(root)
    records = merged.read_schedules()
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    assert sorted(r["worker"] for r in records) == ["w0", "w0", "w1", "w1"]
    steps = [s for r in records for s in r["steps"]]
    assert len(steps) == 4 * CONFIG.steps
    # both fake clusters show the same behaviours (steady, novel-1, novel-2...): in one
    # store each is new once in the whole campaign, whichever worker saw it first
    store = hub.learner.store
    assert {s["state"] for s in steps} | {r["initial_state"] for r in records} == set(range(len(store)))
    assert sum(bool(s["new"]) for s in steps) == len(store) - 1  # the first look's steady state
    stats = merged.read_stats()
    assert stats["steps_done"] == str(len(steps)) and stats["schedules_done"] == "4"
    assert stats["distinct_states"] == str(len(store)) and stats["workers"] == "2"
    assert float(stats["decision_ms_p99"]) >= float(stats["decision_ms_p50"]) >= 0
    assert float(stats["learner_rss_mb"]) > 0
    assert len((root / "plot_data").read_text().splitlines()) == 1 + len(steps)
    for worker, campaign in campaigns.items():  # each worker's own directory: its own steps
        own = campaign.dir.read_stats()
        assert own["steps_done"] == str(2 * CONFIG.steps) and own["worker"] == worker
        assert [r["index"] for r in campaign.dir.read_schedules()] == [0, 1]
        assert campaign.dir.config().seed == worker_seed(CONFIG.seed, worker) != CONFIG.seed
    assert (root / "learner").exists()
    assert len(Learner.from_checkpoint((root / "learner").read_bytes()).store) == len(store)


def test_a_bug_found_by_two_workers_is_one_bundle_with_a_sighting_per_worker_schedule(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    run_workers(root, hub, ["w0", "w1"], schedules=2)
    merged = CampaignDir(root)
    assert merged.known_bugs() == {"log_two-leaders"}
    bundle = root / "bugs" / "log_two-leaders"
    sightings = [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_text().splitlines()]
    assert sorted(s["worker"] for s in sightings) == ["w0", "w0", "w1", "w1"]
    assert sorted(s["worker_schedule"] for s in sightings) == [0, 0, 1, 1]
    first = orjson.loads((bundle / "schedule.json").read_bytes())
    # the run directory came from the worker that reported first, shipped as an archive
    assert (bundle / f"{first['index']:06d}" / "history.edn").read_text() == f"{first['worker']} schedule {first['index']}\n"
    assert merged.read_stats()["bugs_found"] == "1"
    assert not list((root / "bugs").glob(".incoming-*"))


def test_only_the_first_report_of_a_bug_ships_its_files(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    link = FakeHubLink(hub)
    campaign, _ = worker_campaign(root, "w0", link, checker=True)
    campaign.run(schedules=1)
    assert (root / "bugs" / "log_two-leaders" / "000000" / "history.edn").exists()
    assert not list((root / "bugs").glob(".incoming-*")), "the unpacked archive is not left beside the bundles"
    campaign.run(schedules=2)
    reports = [args for method, args in link.calls if method == "report_bug"]
    archives = [args[2] for args in reports]
    assert len(archives) == 3 and archives[0] is not None and archives[1:] == [None, None]
    assert all(args[1].files == [] for args in reports), "the worker's own paths mean nothing on the hub's machine"


def test_two_workers_shipping_one_new_bug_at_once_make_one_bundle_of_the_first(tmp_path):
    """Both asked bug_known before either reported, so both ship their files: the bundle is
    the first report's, the second is a sighting and its files are dropped."""
    hub = LearnerHub(new_campaign(tmp_path))
    runs = {}
    for worker in ("w0", "w1"):
        run = runs[worker] = tmp_path / worker / "000004"
        run.mkdir(parents=True)
        (run / "history.edn").write_text(f"{worker}'s history\n")
    assert not hub.bug_known("log:two-leaders")
    bug = BugReport("log:two-leaders", {"explanation": "two leaders"}, {"index": 4})
    assert hub.report_bug("w0", bug, pack_files([runs["w0"]])) is True
    assert hub.report_bug("w1", bug, pack_files([runs["w1"]])) is False
    bundle = tmp_path / "campaign" / "bugs" / "log_two-leaders"
    assert (bundle / "000004" / "history.edn").read_text() == "w0's history\n"
    sightings = [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_text().splitlines()]
    assert [s["worker"] for s in sightings] == ["w0", "w1"] and hub.progress.bugs == 1
    assert not list(bundle.parent.glob(".incoming-*"))


def test_a_bug_the_learner_cannot_take_stays_in_the_workers_directory(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaign, _ = worker_campaign(root, "w0", FakeHubLink(hub, unreachable={"report_bug"}), checker=True)
    campaign.run(schedules=1)
    assert not CampaignDir(root).known_bugs()
    sightings = (campaign.dir.root / "bugs" / "log_two-leaders" / "sightings.jsonl").read_text()
    assert '"unreported":true' in sightings and '"worker":"w0"' in sightings


def test_a_decision_that_times_out_is_taken_from_the_policy_copy_and_learnt_as_taken(tmp_path):
    """The hub answers `decide` too late (it still chooses, on its side): the worker takes
    its copy's choice, and the hub learns the transitions the worker went through."""
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaign, service = worker_campaign(root, "w0", FakeHubLink(hub, late={"decide"}))
    campaign.run(schedules=2)
    steps = [s for r in campaign.dir.read_schedules() for s in r["steps"]]
    assert {s["fallback"] for s in steps} == {"snapshot"}
    assert service.policy is not None and service.policy is not hub.learner.policy
    stats = CampaignDir(root).read_stats()
    assert stats["fallback_decisions"] == str(len(steps))
    assert campaign.dir.read_stats()["fallback_decisions"] == str(len(steps))
    # what the hub learnt: an action-value for the actions taken, and only for those
    learnt = {action for row in hub.learner.policy.q.values() for action in row}
    assert learnt and learnt <= {s["action"] for s in steps}


def test_without_a_policy_copy_or_a_position_a_worker_decides_at_random(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaign, _ = worker_campaign(root, "w0", FakeHubLink(hub, unreachable={"decide", "snapshot", "observe"}))
    campaign.run(schedules=1)
    (record,) = campaign.dir.read_schedules()
    assert {s["fallback"] for s in record["steps"]} == {"random"}
    assert all(s["state"] is None for s in record["steps"]), "an observation the hub never got teaches nothing"
    assert len(hub.learner.store) == 0


def test_a_decision_waits_the_step_budget_and_every_other_call_the_call_timeout(tmp_path):
    """decide may take the step's budget only (remote.py); the other calls come between
    windows or schedules and wait call_timeout_s. Each decision is timed by the loop.
    (That a worker's budget is a tenth of its window: test_ray_engine.py's WorkerActor test.)"""
    root = new_campaign(tmp_path)
    link = FakeHubLink(LearnerHub(root))
    campaign, service = worker_campaign(root, "w0", link)
    campaign.run(schedules=1)
    assert campaign.progress.decision_ms and len(campaign.progress.decision_ms) == CONFIG.steps
    deadlines = {}
    for method, timeout_s in link.timeouts:
        deadlines.setdefault(method, set()).add(timeout_s)
    assert deadlines.pop("decide") == {BUDGET_S}
    assert {"observe", "end_schedule", "schedule_done", "snapshot", "counters"} <= set(deadlines)
    assert set().union(*deadlines.values()) == {service.call_timeout_s} != {BUDGET_S}


def test_a_restarted_learner_continues_from_its_checkpoint_and_the_worker_goes_on(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    link = FakeHubLink(hub)
    campaign, _ = worker_campaign(root, "w0", link)
    campaign.run(schedules=1)
    states = len(hub.learner.store)
    link.hub = LearnerHub(root)  # the actor died and Ray made it again from DIR
    assert len(link.hub.learner.store) == states and link.hub.progress.schedules_done == 1
    assert link.hub.decide("w0", ["noop"]) is None, "a restarted hub does not know where w0 is"
    campaign.run(schedules=1)
    assert [r["index"] for r in CampaignDir(root).read_schedules()] == [0, 1]
    assert len(link.hub.learner.store) >= states


def test_resume_with_another_number_of_workers_and_then_with_none(tmp_path):
    root = new_campaign(tmp_path)
    run_workers(root, LearnerHub(root), ["w0", "w1"], schedules=1)
    states = len(LearnerHub(root).learner.store)
    hub = LearnerHub(root)  # --resume --workers 3
    assert hub.progress.schedules_done == 2 and hub.progress.steps_done == 2 * CONFIG.steps
    run_workers(root, hub, ["w0", "w1", "w2"], schedules=1)
    merged = CampaignDir(root)
    assert [r["index"] for r in merged.read_schedules()] == [0, 1, 2, 3, 4]
    assert [r["index"] for r in CampaignDir(root / "workers" / "w0").read_schedules()] == [0, 1]
    assert [r["index"] for r in CampaignDir(root / "workers" / "w2").read_schedules()] == [0]
    assert len(hub.learner.store) >= states
    # --resume without --workers: the same directory, one process
    campaign = Campaign(merged, learner_for(merged, merged.config()), FakeTimeline(FakeClock(), FakeNemesis()),
                        FakeNemesis(), LoopConfig(steps=CONFIG.steps, seed=3), sleeper=FakeClock())
    assert campaign.progress.schedules_done == 5 and campaign.progress.states == len(hub.learner.store)
    campaign.run(schedules=1)
    assert merged.schedules_done() == 6


def test_schedule_tickets_hold_a_campaign_to_its_schedules_in_all(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root, schedules=3)
    run_workers(root, hub, ["w0", "w1"], schedules=5)
    assert CampaignDir(root).schedules_done() == 3
    assert not hub.begin_schedule("w2")


def test_a_dead_workers_ticket_and_trajectory_go_its_learning_stays(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root, schedules=1)
    assert hub.begin_schedule("w0") and not hub.begin_schedule("w1")
    assert hub.begin_schedule("w0"), "a worker asking again keeps its ticket"
    hub.observe("w0", Transition(window=WindowSeen(frozenset({"a", "b"}))))
    hub.worker_gone("w0")
    assert "w0" not in hub.trajectories and len(hub.learner.store) == 1
    assert hub.begin_schedule("w1")


def test_local_learner_is_the_single_process_campaign(tmp_path):
    """The in-process service feeds one Learner exactly as the loop used to: decide is
    next_action, a transition with the action decided observes the window."""
    directory = CampaignDir(tmp_path / "c")
    directory.create(CONFIG)
    learner = Learner.create(policy="qlearning", seed=1)
    twin = Learner.create(policy="qlearning", seed=1)
    service = LocalLearner(learner, directory)
    window = WindowSeen(frozenset({"x", "y"}), frozenset({"p>q"}))
    first = service.observe("local", Transition(window=window))
    twin.observe_window(window.summary, window.pairs)
    for _ in range(5):
        decided = service.decide("local", ["a", "b", "c"]).action
        assert decided == twin.next_action(["a", "b", "c"])
        service.observe("local", Transition(decided, ("a", "b", "c"), window=window))
        twin.observe_window(window.summary, window.pairs)
    service.end_schedule("local")
    twin.end_schedule()
    service.schedule_done("local", {"index": 0})
    assert directory.load_learner() == twin.to_checkpoint()
    assert (first.state_id, first.is_new, first.new_pairs, first.states, first.pairs_covered) == (0, True, 1, 1, 1)


def test_a_bundles_files_travel_as_an_archive_and_cannot_escape(tmp_path):
    run = tmp_path / "000003"
    (run / "logs").mkdir(parents=True)
    (run / "history.edn").write_text("h")
    (run / "logs" / "n1.log").write_text("l")
    out = unpack_files(pack_files([run, tmp_path / "absent"]), tmp_path / "in")
    assert out == [tmp_path / "in" / "000003"]
    assert (out[0] / "logs" / "n1.log").read_text() == "l"
    import io
    import tarfile

    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../outside")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.TarError):
        unpack_files(evil.getvalue(), tmp_path / "in2")
    assert not (tmp_path / "outside").exists()


def test_a_dead_workers_run_is_cleaned_only_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MALLORY_DATA_ROOT", str(tmp_path / "data"))
    record = register_run("fzlive-w0")  # owned by this (live) process
    assert clean_dead_run("fzlive-w0", wait_s=0.0) == []
    assert record.state_dir.exists(), "a live run is never touched"
    assert clean_dead_run("fzabsent-w0", wait_s=0.0) == []
    # a run whose owner (a worker's process) has exited, with a directory in its journal
    made = tmp_path / "data" / "fzdead-w0-files"
    code = ("import sys; from mallory.cluster.registry import register_run; "
            "register_run('fzdead-w0').record(dir=sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, str(made)], check=True, cwd=paths.HOME, timeout=60)
    made.mkdir(parents=True)
    assert clean_dead_run("fzdead-w0", wait_s=0.0) == [f"dir {made}"]
    assert not made.exists() and "fzdead-w0" not in {r.name for r in list_runs()}


def test_mallory_fuzz_without_workers_never_imports_ray():
    """Statically: only ray_engine.py imports ray, and only fuzz.py's --workers path imports
    it. Dynamically: the fuzz command's module and all it imports leave ray out."""
    importers = []
    for path in (paths.HOME / "mallory").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.append(path.relative_to(paths.HOME).as_posix())
    assert sorted(set(importers)) == ["mallory/campaign/ray_engine.py"]
    code = "import sys, mallory.cli, mallory.commands.fuzz; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=paths.HOME, timeout=60)


def test_workers_options_are_checked_before_anything_starts(tmp_path):
    def fuzz(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mallory.cli", "fuzz", "--sut", "suts/example/example.toml",
                               "--workload", "register", "--out", str(tmp_path / "c"), *args], cwd=paths.HOME, capture_output=True, text=True,
                              timeout=60)

    for args, message in ((("--ray", "auto"), "--ray needs --workers N"),
                          (("--workers", "0"), "--workers must be at least 1"),
                          (("--workers", "2", "--backend", "docker"), "--backend netns")):
        done = fuzz(*args)
        assert done.returncode == 254 and message in done.stderr, (args, done.stderr)
        assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("method", ["counters", "end_schedule", "schedule_done", "begin_schedule"])
def test_a_learner_that_cannot_be_reached_never_stops_a_worker(tmp_path, method):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaign, service = worker_campaign(root, "w0", FakeHubLink(hub, unreachable={method}))
    assert service.begin_schedule("w0")
    started = time.monotonic()
    campaign.run(schedules=1)
    assert time.monotonic() - started < 30
    assert [r["index"] for r in campaign.dir.read_schedules()] == [0]


def test_a_scripted_action_is_not_learnt_even_if_it_was_not_offered(tmp_path):
    """Replay and shrink re-enact recorded (or weakened) faults: the learner only watches."""
    directory = CampaignDir(tmp_path / "c")
    directory.create(CONFIG)
    learner = Learner.create(policy="qlearning", seed=1)
    service = LocalLearner(learner, directory)
    window = WindowSeen(frozenset({"x"}))
    service.observe("local", Transition(window=window))
    service.observe("local", Transition("kill:one", ("kill:all", "noop"), chosen=False, window=window))
    service.end_schedule("local")
    assert learner.policy.q == {}


@pytest.mark.parametrize("start", ["first look", "plan"])
def test_a_schedules_start_ends_the_last_schedule_whose_end_never_came(tmp_path, start):
    """A worker's end_schedule that timed out: the hub ends that schedule when the next
    one starts (its plan, or its first look), so no transition and no waypoint level is
    carried across schedules."""
    hub = LearnerHub(new_campaign(tmp_path))
    hub.observe("w0", Transition(window=WindowSeen(frozenset({"a"}))))
    action = hub.decide("w0", ["noop", "kill:one"])
    hub.observe("w0", Transition(action, ("noop", "kill:one"), window=WindowSeen(frozenset({"b"}), waypoint=2)))
    assert hub.trajectories["w0"].level == 2 and not hub.learner.policy.q
    if start == "plan":  # the next schedule, no end_schedule before
        assert hub.plan("w0", ["noop", "kill:one"], 6, 2.5, 1) is None, "qlearning plans nothing, but ends"
    else:
        hub.observe("w0", Transition(window=WindowSeen(frozenset({"c"}))))
    trajectory = hub.trajectories["w0"]
    assert trajectory.level == 0 and trajectory.acting is None
    learnt = hub.learner.policy.q
    assert learnt, "the last schedule's last transition was learnt, as terminal"


def test_a_schedules_end_learns_its_last_step_and_is_durable_before_its_record(tmp_path):
    """end_schedule learns the last transition (as terminal); schedule_done saves the
    checkpoint before it files the record, so a recorded schedule is in the checkpoint."""
    hub = LearnerHub(new_campaign(tmp_path))
    hub.observe("w0", Transition(window=WindowSeen(frozenset({"a"}))))
    action = hub.decide("w0", ["noop", "kill:one"])
    hub.observe("w0", Transition(action, ("noop", "kill:one"), window=WindowSeen(frozenset({"b"}))))
    hub.end_schedule("w0")
    assert action in hub.learner.policy.q[0], "the one step of the schedule is learnt at its end"
    durable_at_record: list[bool] = []
    write_schedule = hub.dir.write_schedule

    def writing(index, record):
        durable_at_record.append(hub.dir.load_learner() == hub.learner.to_checkpoint())
        return write_schedule(index, record)

    hub.dir.write_schedule = writing
    assert hub.schedule_done("w0", {"index": 7, "steps": []}) == 0
    assert durable_at_record == [True]


def test_a_closing_hub_saves_what_it_learnt_since_the_last_schedule(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    hub.observe("w0", Transition(window=WindowSeen(frozenset({"a"}))))
    assert CampaignDir(root).load_learner() is None
    hub.close()
    assert len(Learner.from_checkpoint(CampaignDir(root).load_learner()).store) == 1


def seen(name: str) -> WindowSeen:
    """A window of a position of its own: its summary shares nothing with another name's,
    and its faults in force (the campaign's context: CONFIG's default) are `name`."""
    return WindowSeen(frozenset(f"{name}-{i}" for i in range(30)), faults=(name,))


def test_two_workers_interleaved_each_keep_their_own_trajectory(tmp_path):
    """The calls of two workers interleave on the hub; each worker's transitions are learnt
    from its own states, and one worker's schedule end leaves the other where it was."""
    hub = LearnerHub(new_campaign(tmp_path))
    actions = ["noop", "kill:one"]
    first = hub.observe("w0", Transition(window=seen("a")))
    action = hub.decide("w0", actions)
    second = hub.observe("w0", Transition(action, tuple(actions), window=seen("b")))
    other = hub.observe("w1", Transition(window=seen("c")))  # w1's schedule starts
    assert len({first.policy_state, second.policy_state, other.policy_state}) == 3
    again = hub.decide("w0", actions)  # learns w0's first step: from a, not from w1's c
    assert set(hub.learner.policy.q) == {first.policy_state}
    hub.observe("w0", Transition(again, tuple(actions), window=seen("d")))
    hub.end_schedule("w0")
    assert set(hub.learner.policy.q) == {first.policy_state, second.policy_state}
    assert hub.decide("w1", actions) in actions, "w1 is still where it was"


def test_the_merged_counters_take_each_workers_timings_novelty_and_waypoints(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    assert hub.progress.last_new_state_s is None
    hub.observe("w0", Transition(window=WindowSeen(frozenset({"a"})), feedback_ms=40.0))
    action = hub.decide("w0", ["noop"])
    hub.observe("w1", Transition(window=WindowSeen(frozenset({"a"})), feedback_ms=60.0))
    hub.observe("w0", Transition(action, ("noop",), window=WindowSeen(frozenset({"b"}), waypoint=2),
                                 feedback_ms=50.0, decision_ms=3.0))
    p = hub.progress_now()
    assert sorted(p.feedback_ms) == [40.0, 50.0, 60.0] and p.decision_ms == [3.0]
    assert p.last_new_state_s is not None and p.deepest_waypoint == 2
    hub.end_schedule("w0")
    hub.schedule_done("w0", {"index": 0, "steps": [], "waypoint": "leader-elected"})
    stats = CampaignDir(root).read_stats()
    assert stats["waypoints_reached"] == "leader-elected:1" and stats["feedback_ms_p50"] == "50.0"
    assert stats["last_new_state"] != "-"


def test_a_workers_position_is_its_schedules_and_a_lost_window_keeps_the_last_counts(tmp_path):
    """A position the hub gave belongs to that schedule: after end_schedule a worker that
    got none yet for the next one, and no answer to decide, chooses at random, not from
    where the last schedule ended. An observation the hub did not take teaches nothing and
    keeps the counts last known."""
    root = new_campaign(tmp_path)
    link = FakeHubLink(LearnerHub(root))
    service = RemoteLearner(link, worker_directory(root, "w0", CONFIG), budget_s=BUDGET_S)
    service.counters()
    seen = service.observe("w0", Transition(window=WindowSeen(frozenset({"a", "b"}), frozenset({"p>q"}))))
    assert (seen.states, seen.pairs_covered) == (1, 1) and service.policy is not None
    link.unreachable |= {"decide"}
    assert service.decide("w0", ["noop", "kill:one"]).fallback == "snapshot"
    service.end_schedule("w0")
    link.unreachable |= {"observe"}
    lost = service.observe("w0", Transition(window=WindowSeen(frozenset({"c"}))))
    assert (lost.states, lost.pairs_covered, lost.state_id) == (1, 1, None)
    assert service.decide("w0", ["noop", "kill:one"]).fallback == "random"


def test_a_workers_policy_copy_is_the_hubs_after_each_schedule(tmp_path):
    root = new_campaign(tmp_path)
    hub = LearnerHub(root)
    campaign, service = worker_campaign(root, "w0", FakeHubLink(hub))
    campaign.run(schedules=1)
    assert hub.learner.policy.q, "the schedule taught the hub's policy something"
    assert service.policy.to_state() == hub.learner.policy.to_state()


class SamplerNemesis(FakeNemesis):
    """Offers one fault, a sampler policy's."""

    def actions(self) -> list[str]:
        return ["rounds:lossy-sync"]


@pytest.mark.parametrize("unreachable, fallback", [(set(), None), ({"decide"}, "snapshot"),
                                                   ({"decide", "observe"}, "snapshot")])
def test_a_sampler_policy_takes_its_fault_every_step_whoever_decides(tmp_path, unreachable, fallback):
    """--policy rounds through a shared learner: the hub's policy takes the fault, and so does
    the worker's copy when the hub does not answer, even where it was never told a position
    (a sampler reads none), instead of a random action (heal, noop)."""
    config = CampaignConfig(sut="fake", policy="rounds", faults=("rounds:lossy-sync",), seed=3, steps=3)
    root = tmp_path / "campaign"
    CampaignDir(root).create(config)
    local = worker_directory(root, "w0", config)
    service = RemoteLearner(FakeHubLink(LearnerHub(root), unreachable=unreachable), local, budget_s=BUDGET_S)
    clock, nemesis = FakeClock(), SamplerNemesis()
    campaign = Campaign(local, service, FakeTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=3, window_s=2.5, reset_s=5.0, seed=1), sleeper=clock, worker="w0")
    campaign.run(schedules=2)
    steps = [s for r in local.read_schedules() for s in r["steps"]]
    assert [s["action"] for s in steps] == ["rounds:lossy-sync"] * 6
    assert {s.get("fallback") for s in steps} == {fallback}


def test_one_window_faults_and_truncated_windows_reach_a_shared_learner_as_a_local_one(tmp_path):
    """What the loop does itself does not depend on where the learner is: through the hub,
    a fault that lasts one window (a filter set) is judged with it in force, then healed,
    so it never accumulates in the faults context; a truncated window is recorded so, late,
    teaches nothing, and the merged stats count it late."""
    config = CampaignConfig(sut="fake", policy="qlearning", context="faults", seed=3, steps=4)
    root = tmp_path / "campaign"
    CampaignDir(root).create(config)
    hub = LearnerHub(root)
    local = worker_directory(root, "w0", config)
    service = RemoteLearner(FakeHubLink(hub), local, budget_s=BUDGET_S)
    clock, nemesis = FakeClock(), FakeNemesis()
    nemesis.window_only = {"novel"}

    class Truncating(FakeTimeline):
        def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
            window = super().window(start_ns, end_ns, wait_s)
            return Window(frozenset({"part"}), 1, False, truncated=True) if self.calls == 3 else window

    campaign = Campaign(local, service, Truncating(clock, nemesis), nemesis,
                        LoopConfig(steps=4, window_s=2.5, reset_s=5.0, seed=1), sleeper=clock, worker="w0")
    record = campaign.run_schedule(0, script=[ScriptedStep("novel", 0), ScriptedStep("novel", 1),
                                               ScriptedStep("dull-1", 2), ScriptedStep("novel", 3)])
    steps = record["steps"]
    assert [s.get("healed_after_window") for s in steps] == [True, True, None, True]
    assert steps[1]["truncated"] and steps[1]["late"] and steps[1]["state"] is None
    assert not any(s.get("truncated") for s in steps[::2])
    configurations = set(hub.learner.configurations)
    assert {("novel",), ("dull-1", "novel")} <= configurations and ("novel", "novel") not in configurations
    assert hub.learner.policy.q == {}, "scripted steps are watched, not learnt as choices"
    assert CampaignDir(root).read_stats()["late_steps"] == "1"


def test_modelfuzz_plans_and_model_coverage_go_through_a_shared_learner(tmp_path, lock_file):  # noqa: F811
    """--policy modelfuzz --reward model with two workers and one hub: each worker plays the
    plans the hub made for it exactly (seed, actions, draws, windows), their windows' model
    states land in one model coverage, the schedules that reached new ones are the hub's
    corpus in DIR/corpus/, and the merged stats count the model."""
    config = CampaignConfig(sut="fake", policy="modelfuzz", reward="model", model=str(lock_file), seed=4, steps=4)
    root = tmp_path / "campaign"
    CampaignDir(root).create(config)
    hub = LearnerHub(root)
    plans: dict[str, list] = {"w0": [], "w1": []}
    plan = hub.plan

    def planning(worker, *args):  # the plans each worker got, to compare with what it enacted
        plans[worker].append(plan(worker, *args))
        return plans[worker][-1]

    hub.plan = planning
    campaigns = {}
    for worker in ("w0", "w1"):
        local = worker_directory(root, worker, config)
        clock, nemesis = FakeClock(), FakeNemesis()
        service = RemoteLearner(FakeHubLink(hub), local, budget_s=BUDGET_S)
        campaigns[worker] = Campaign(local, service, TracingTimeline(clock, nemesis), nemesis,
                                     LoopConfig(steps=4, window_s=WINDOW_S, reset_s=1.0, seed=local.config().seed),
                                     sleeper=clock, worker=worker,
                                     model=bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"]))
    for _ in range(4):
        for campaign in campaigns.values():
            campaign.run(schedules=1)
    for worker, campaign in campaigns.items():
        records = campaign.dir.read_schedules()
        assert [played(r) for r in records] == [(p.seed, [tuple(s) for s in p.steps]) for p in plans[worker]]
        assert all("fallback" not in s for r in records for s in r["steps"]), "a planned step asks nothing"
    coverage = hub.learner.model_coverage
    assert coverage.states, "the workers' windows reached model states"
    new_in_steps = sum(s.get("new_model_states", 0) for c in campaigns.values() for r in c.dir.read_schedules()
                       for s in r["steps"])
    assert 0 < new_in_steps <= len(coverage.states), "each step's record says what it added to the shared coverage"
    stats = CampaignDir(root).read_stats()
    assert stats["model_states"] == str(len(coverage.states)) and "model_mismatches" in stats
    corpus = read_corpus(CampaignDir(root))
    assert corpus and corpus == hub.learner.policy.corpus.to_state()
    played_anywhere = [played(r) for c in campaigns.values() for r in c.dir.read_schedules()]
    assert all(planned(entry) in played_anywhere for entry in corpus), "kept: what a worker played"


def test_a_worker_without_its_plan_decides_step_by_step_and_keeps_nothing(tmp_path, lock_file):  # noqa: F811
    config = CampaignConfig(sut="fake", policy="modelfuzz", reward="model", model=str(lock_file), seed=4, steps=4)
    root = tmp_path / "campaign"
    CampaignDir(root).create(config)
    hub = LearnerHub(root)
    local = worker_directory(root, "w0", config)
    clock, nemesis = FakeClock(), FakeNemesis()
    campaign = Campaign(local, RemoteLearner(FakeHubLink(hub, late={"plan"}), local, budget_s=BUDGET_S),
                        TracingTimeline(clock, nemesis), nemesis, LoopConfig(steps=4, window_s=WINDOW_S, seed=1),
                        sleeper=clock, worker="w0",
                        model=bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"]))
    campaign.run(schedules=3)
    records = local.read_schedules()
    assert all("plan" not in r and len(r["steps"]) == 4 for r in records)
    assert hub.learner.model_coverage.states and hub.learner.policy.corpus.entries == []
