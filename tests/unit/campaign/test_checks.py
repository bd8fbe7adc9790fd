"""The checks after each schedule, on run directories written by hand (no cluster): one
history gives one bug whatever its anomalies, beside results.edn lie the pictures of its
verdict, a log line seen twice in a schedule is one sighting, and two schedules with
different anomaly mixes of one class are one bundle with two sightings."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson

from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.harness.runner import RunConfig
from mallory.history.ops import write_edn
from tests.unit.oracles.txn_histories import concurrent
from tests.unit.pictures.histories import failover_history, stale_read_history
from tests.unit.pictures.svg_checks import cycle_parts, elements, parse_svg


class FakeBackend:
    def __init__(self, root: Path) -> None:
        self.nodes = ["n1", "n2"]
        self.root = root
        self.exit_status: dict[str, int] = {}

    def is_running(self, proc: str) -> bool:
        return proc not in self.exit_status

    def wait(self, proc: str, timeout: float) -> int | None:
        return self.exit_status.get(proc)


class FakeAdapter:
    """Nodes whose main process logs to DIR/<node>.log; `process(node)` is the node's name."""

    def __init__(self, root: Path) -> None:
        self.backend = FakeBackend(root)

    def log_paths(self, node: str) -> list[Path]:
        return [self.backend.root / f"{node}.log"]

    def process(self, node: str) -> str:
        return node


def checks(tmp_path: Path) -> tuple[ScheduleChecks, CampaignDir, FakeAdapter]:
    directory = CampaignDir(tmp_path / "campaign")
    directory.create(CampaignConfig(sut="fake", seed=1))
    adapter = FakeAdapter(tmp_path)
    return ScheduleChecks(adapter, directory, None, RunConfig()), directory, adapter


def run_schedule(sc: ScheduleChecks, directory: CampaignDir, index: int, history=None, logs: dict | None = None):
    """A schedule whose workload recorded `history` and whose nodes logged `logs`; its
    evidence, recorded as the campaign loop records it."""
    sc.begin_schedule(index)
    if history is not None:
        with open(directory.run_dir(index) / "history.edn", "w") as f:
            write_edn(history, f)
    for node, text in (logs or {}).items():
        with open(sc.adapter.log_paths(node)[0], "a") as f:
            f.write(text)
    record = {"index": index}
    evidence = sc.check_schedule(index, record)
    for e in evidence:
        directory.record_bug(e.signature, e.report, record, e.files, directory.config(), e.sighting)
    return evidence, record


def sightings(bundle: Path) -> list[dict]:
    return [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_bytes().splitlines()]


def test_one_history_one_bug_with_its_pictures_beside_results_edn(tmp_path):
    sc, directory, _ = checks(tmp_path)
    history = failover_history()
    (evidence,), record = run_schedule(sc, directory, 0, history)
    assert evidence.signature.startswith("list-append-not-serializable-")
    anomalies = evidence.report["details"]["anomalies"]
    assert record["history"]["anomalies"] == sorted(anomalies) == evidence.sighting["seen"]
    run = directory.run_dir(0)
    assert (run / "results.edn").exists()
    assert elements(parse_svg((run / "latency-raw.svg").read_text()), "rect", "fault")
    for kind, cases in anomalies.items():
        for k, case in enumerate(cases, start=1):
            picture = run / f"{kind}-{k}.svg"
            assert picture.exists() == ("cycle" in case), picture
            if "cycle" in case:
                txns, deps = cycle_parts(picture.read_text())
                assert len(txns) == len(deps) == len(case["cycle"])
    bundle = directory.root / "bugs" / evidence.signature
    assert (bundle / "000000" / "latency-raw.svg").exists(), "the bundle keeps the run's pictures"


def test_two_schedules_with_different_mixes_of_one_class_are_one_bug_with_two_sightings(tmp_path):
    sc, directory, _ = checks(tmp_path)
    (first,), _ = run_schedule(sc, directory, 0, failover_history())
    (second,), _ = run_schedule(sc, directory, 1, concurrent("rx_ay1", "ry_ax1"))  # write skew only
    (stale,), _ = run_schedule(sc, directory, 2, stale_read_history())  # real time only: another class
    assert first.signature == second.signature != stale.signature
    assert directory.known_bugs() == {first.signature, stale.signature}
    seen = [(s["schedule"], s["seen"]) for s in sightings(directory.root / "bugs" / first.signature)]
    assert seen == [(0, first.sighting["seen"]), (1, ["G2-item"])] and len(first.sighting["seen"]) > 2


def test_a_log_line_seen_twice_in_a_schedule_is_one_sighting(tmp_path):
    sc, directory, _ = checks(tmp_path)
    logs = {"n1": "panic: term 3 index 7\nok\npanic: term 4 index 9\n", "n2": "panic: term 5 index 1\n"}
    (evidence,), record = run_schedule(sc, directory, 0, logs=logs)
    assert evidence.sighting == {"occurrences": 3, "nodes": ["n1", "n2"], "seen": []}
    assert record["checks"]["findings"] == 3
    (line,) = sightings(directory.root / "bugs" / evidence.signature)
    assert line["occurrences"] == 3


def test_a_death_is_signed_by_the_signal_and_the_last_line_logged(tmp_path):
    sc, directory, adapter = checks(tmp_path)
    adapter.backend.exit_status["n2"] = -signal.SIGSEGV
    (death,), _ = run_schedule(sc, directory, 0, logs={"n2": "starting\nreplica 3: applying entry 42\n"})
    assert death.report["node"] == "n2" and death.report["kind"] == "killed-by-SIGSEGV"
    assert death.report["details"]["last_line"] == "replica 3: applying entry 42"
    (again,), _ = run_schedule(sc, directory, 1, logs={"n2": "replica 1: applying entry 7\n"})
    assert again.signature == death.signature
