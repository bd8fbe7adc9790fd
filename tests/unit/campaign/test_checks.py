"""The checks after each schedule, on run directories written by hand (no cluster): one
history gives one bug whatever its anomalies, beside results.edn lie the pictures of its
verdict, a log line seen twice in a schedule is one sighting, the lines an SUT names as
bugs (raft-kv's, on raft10's real log) are findings beside the built-in patterns, and two
schedules with different anomaly mixes of one class are one bundle with two sightings;
the replica and liveness oracles are wired in (each fires on its fake evidence, none on a
healthy schedule; a node that cannot restart names the bug line among its last), and a
death carries its node's last lines and backtrace into report.json."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson

from mallory import paths
from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.harness.runner import RunConfig
from mallory.harness.spec import load_spec
from mallory.history.edn import Keyword
from mallory.history.ops import NEMESIS, Op, write_edn
from tests.unit.oracles.txn_histories import concurrent
from tests.unit.pictures.histories import failover_history, stale_read_history
from tests.unit.pictures.svg_checks import cycle_parts, elements, parse_svg
from tests.unit.suts.test_raft_kv_log_bugs import RAFT10_N1


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


class FakeReplicatedAdapter(FakeAdapter):
    """Nodes that report what they applied (ReportsApplied): `digests`, as given."""

    def __init__(self, root: Path, digests: dict[str, dict[int, str]]) -> None:
        super().__init__(root)
        self.digests = digests

    def applied_digests(self) -> dict[str, dict[int, str]]:
        return self.digests


RAFT_KV = load_spec(paths.SUTS / "raft" / "raft.toml")
RAFT_KV_LEADER = RAFT_KV.leader_line


class FakeRaftKvAdapter(FakeAdapter):
    """Nodes that run raft-kv, as far as the log oracle can tell: its spec's `log_bugs`."""

    log_bugs = RAFT_KV.log_bugs


def checks(tmp_path: Path, adapter: FakeAdapter | None = None, **options) -> tuple[ScheduleChecks, CampaignDir, FakeAdapter]:
    directory = CampaignDir(tmp_path / "campaign")
    directory.create(CampaignConfig(sut="fake", seed=1))
    adapter = adapter or FakeAdapter(tmp_path)
    return ScheduleChecks(adapter, directory, None, RunConfig(), **options), directory, adapter


def run_schedule(sc: ScheduleChecks, directory: CampaignDir, index: int, history=None, logs: dict | None = None,
                 reset: dict | None = None):
    """A schedule whose workload recorded `history`, whose nodes logged `logs` and whose
    reset reported `reset`; its evidence, recorded as the campaign loop records it."""
    sc.begin_schedule(index)
    if history is not None:
        with open(directory.run_dir(index) / "history.edn", "w") as f:
            write_edn(history, f)
    for node, text in (logs or {}).items():
        with open(sc.adapter.log_paths(node)[0], "a") as f:
            f.write(text)
    record = {"index": index, **({"reset": reset} if reset is not None else {})}
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


def test_the_lines_the_sut_names_as_bugs_are_findings_beside_the_built_in_patterns(tmp_path):
    sc, directory, _ = checks(tmp_path, FakeRaftKvAdapter(tmp_path))
    found, _ = run_schedule(sc, directory, 0, logs={"n1": RAFT10_N1, "n2": "panic: term 5 index 1\n"})
    kinds = {(e.report["kind"], e.report["node"]) for e in found}
    assert kinds == {("libraft-committed-entry-conflict", "n1"), ("panic", "n2")}
    again, _ = run_schedule(sc, directory, 1, logs={"n2": RAFT10_N1.replace("313", "7").replace("10254", "12")})
    assert [e.signature for e in again] == [e.signature for e in found if e.report["node"] == "n1"]


def test_a_death_is_signed_by_the_signal_and_the_last_line_logged(tmp_path):
    sc, directory, adapter = checks(tmp_path)
    adapter.backend.exit_status["n2"] = -signal.SIGSEGV
    (death,), _ = run_schedule(sc, directory, 0, logs={"n2": "starting\nreplica 3: applying entry 42\n"})
    assert death.report["node"] == "n2" and death.report["kind"] == "killed-by-SIGSEGV"
    assert death.report["details"]["last_line"] == "replica 3: applying entry 42"
    (again,), _ = run_schedule(sc, directory, 1, logs={"n2": "replica 1: applying entry 7\n"})
    assert again.signature == death.signature


def test_replicas_that_applied_different_commands_are_a_bug_and_agreeing_ones_are_not(tmp_path):
    digests = {"n1": {42: "aa", 44: "cc"}, "n2": {42: "bb"}}
    sc, directory, _ = checks(tmp_path, FakeReplicatedAdapter(tmp_path, digests))
    (evidence,), record = run_schedule(sc, directory, 0)
    assert evidence.report["oracle"] == "replicas" and evidence.report["kind"] == "divergence"
    assert evidence.report["details"]["index"] == 42
    assert record["replicas"] == {"n1": {"42": "aa", "44": "cc"}, "n2": {"42": "bb"}}
    digests["n2"][42] = "aa"
    assert run_schedule(sc, directory, 1)[0] == []


def test_two_nodes_that_logged_leading_one_term_are_a_bug(tmp_path):
    sc, directory, _ = checks(tmp_path, leader_line=RAFT_KV_LEADER)
    led = "[raft-kv 10.0.0.{} term {} leader] became leader (was candidate)\n"
    (evidence,), _ = run_schedule(sc, directory, 0, logs={"n1": led.format(1, 3), "n2": led.format(2, 3)})
    assert evidence.report["kind"] == "two-leaders-in-a-term" and evidence.report["details"]["leaders"] == ["n1", "n2"]
    assert run_schedule(sc, directory, 1, logs={"n1": led.format(1, 4), "n2": led.format(2, 5)})[0] == []


def test_the_one_node_a_reset_could_not_bring_back_is_a_bug_with_its_last_lines(tmp_path):
    sc, directory, _ = checks(tmp_path)
    reset = {"healthy": False, "unready": {"n2": {"how": "exited", "message": "n2 exited before it was ready"}}}
    (evidence,), _ = run_schedule(sc, directory, 0, logs={"n2": "loading log\nraft_start: bad format version 99\n"},
                                  reset=reset)
    assert evidence.report["kind"] == "cannot-restart" and evidence.report["node"] == "n2"
    assert evidence.report["details"]["last_log_lines"] == ["loading log", "raft_start: bad format version 99"]
    assert evidence.report["details"]["log_bug"] is None
    healthy = {"healthy": True, "unready": {}}
    assert run_schedule(sc, directory, 1, logs={"n2": "fine\n"}, reset=healthy)[0] == []


def test_a_node_that_cannot_restart_names_the_bug_line_among_its_last(tmp_path):
    sc, directory, _ = checks(tmp_path, FakeRaftKvAdapter(tmp_path))
    reset = {"healthy": False, "unready": {"n1": {"how": "exited", "message": "n1 exited before it was ready"}}}
    found, _ = run_schedule(sc, directory, 0, logs={"n1": RAFT10_N1}, reset=reset)
    (restart,) = [e for e in found if e.report["kind"] == "cannot-restart"]
    assert restart.report["details"]["log_bug"] == {"name": "libraft-committed-entry-conflict", "line": RAFT10_N1.splitlines()[3]}
    assert "libraft-committed-entry-conflict" in restart.report["message"]
    plain, _ = run_schedule(sc, directory, 1, logs={"n1": "starting\n"}, reset=reset)
    assert [e.signature for e in plain] == [restart.signature]  # the cause is named, not signed


def _served(ok_after_heal_s: float | None) -> list[Op]:
    """A register history: reads (of nothing) every second for 25 s, a heal at 5 s, ok
    before it and (when given) from `ok_after_heal_s` after it on, info otherwise."""
    ops = []
    for t in range(25):
        ok = t < 5 or (ok_after_heal_s is not None and t >= 5 + ok_after_heal_s)
        ops.append(Op(len(ops), 0, Keyword("invoke"), Keyword("read"), None, t * 10**9))
        ops.append(Op(len(ops), 0, Keyword("ok" if ok else "info"), Keyword("read"), None, t * 10**9 + 5))
        if t == 5:
            ops.append(Op(len(ops), NEMESIS, Keyword("info"), Keyword("heal"), None, t * 10**9 + 6))
    return ops


def test_a_cluster_that_serves_nobody_long_after_the_heal_is_stuck(tmp_path):
    sc, directory, _ = checks(tmp_path, stuck_after_s=10.0)
    found, _ = run_schedule(sc, directory, 0, history=_served(None))
    assert [e.report["kind"] for e in found] == ["stuck"]
    assert run_schedule(sc, directory, 1, history=_served(2))[0] == []


def test_a_death_carries_the_nodes_last_lines_and_backtrace_into_report_json(tmp_path):
    sc, directory, adapter = checks(tmp_path)
    adapter.backend.exit_status["n1"] = -signal.SIGSEGV
    log = ("applying entry 42\n==mallory== caught SIGSEGV: backtrace of pid 7, innermost first\n"
           "==mallory== #1 0x7f00 /nonexistent/libc.so.6+0x3c050\n==mallory== #2 0x5500 /nonexistent/raft-kv+0x1169\n"
           "==mallory== end of backtrace\n")
    (death,), record = run_schedule(sc, directory, 0, logs={"n1": log})
    bundle = directory.root / "bugs" / death.signature
    report = orjson.loads((bundle / "report.json").read_bytes())
    assert report["details"]["last_log_lines"] == ["applying entry 42"]
    assert [f["module"] for f in report["details"]["backtrace"]] == ["/nonexistent/libc.so.6", "/nonexistent/raft-kv"]


def test_a_death_the_reset_restarted_is_judged_on_its_log_up_to_the_restart(tmp_path):
    sc, directory, adapter = checks(tmp_path)
    log = adapter.log_paths("n2")[0]
    log.write_text("before the schedule\n")
    sc.begin_schedule(0)
    with open(log, "a") as f:
        f.write("truncating uncommitted entries\napplying entry 42\n")
    died_at = log.stat().st_size
    with open(log, "a") as f:  # the restarted process's lines come after
        f.write("started: id 7\nfollowing leader n1\n")
    record = {"index": 0, "reset": {"exited": {"n2": {"status": -signal.SIGSEGV, "log_end": died_at},
                                               "n1": {"status": -signal.SIGKILL, "log_end": 0}}, "unready": {}}}
    (death,) = sc.check_schedule(0, record)
    assert death.report["node"] == "n2" and death.report["kind"] == "killed-by-SIGSEGV"
    assert death.report["details"]["last_log_lines"] == ["truncating uncommitted entries", "applying entry 42"]
