"""What runs around each schedule of a live campaign: the workload, and the checks after it.

At a schedule's start, `ScheduleChecks` notes where every node's logs end and starts the
client workload in the background, recording `runs/NNNNNN/history.edn` (+ `.jsonl`). When
every fault is healed it records a `heal` nemesis op. At the schedule's end it gives the
cluster up to `stuck_after_s` from that heal to serve a client again, stops the workload,
checks the history (the checker is inferred from the workload: linearizability for
registers, Elle-style for transactions) and draws its verdict beside it, in a child process
so a large check's memory goes with it (`history_check.check_run_history_in_child`), scans
the log lines the schedule added for the log patterns (the SUT's own `[[log_bugs]]` first,
then the built-in ones), AddressSanitizer reports and two leaders in one term, notices processes that died by an
unexpected signal (with their last log lines and, when the fault shim caught the crash,
its backtrace, symbolized), compares what the replicas applied (an adapter that
`ReportsApplied`), finds the node the reset could not bring back while the others came
back, and a cluster stuck after the heal; then writes Jepsen's `results.edn`. The findings
are grouped by signature (a history gives one whatever its anomalies; a log line seen
twice is one), and each group becomes `BugEvidence`; the campaign turns those into bundles
(one per signature) and sightings (one per schedule).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

from mallory.campaign.directory import CampaignDir
from mallory.campaign.history_check import check_run_history_in_child
from mallory.campaign.loop import BugEvidence
from mallory.campaign.symbols import symbolize
from mallory.files import atomic_write
from mallory.harness.adapter import (
    DeclaresLogBugs,
    HasProcess,
    ReportsApplied,
    SutAdapter,
)
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, WorkloadRunner
from mallory.harness.session import client_node_for
from mallory.harness.workload import make_workload
from mallory.history.ops import Op
from mallory.log_lines import LogPattern
from mallory.oracles.asan import parse_asan
from mallory.oracles.liveness import HEAL, cannot_restart_findings, stuck_findings
from mallory.oracles.logs import DEFAULT_PATTERNS, death_finding, scan_log
from mallory.oracles.replicas import (
    divergence_findings,
    leader_terms,
    two_leaders_findings,
)
from mallory.oracles.results_edn import results_edn
from mallory.oracles.triage import Bug, Finding, deduplicate, findings_from_result

#: the longest run a schedule's workload may have; the campaign stops it at the schedule end
_FOREVER_S = 24 * 3600.0
#: each schedule's workload uses keys from its own range: a schedule's history is checked on
#: its own, so it must not read what an earlier schedule (on the same cluster) wrote
KEYS_PER_SCHEDULE = 1_000_000
#: how long after every fault healed a cluster may serve no client before it counts as stuck
#: (the reset's restarts and elections come within it)
STUCK_AFTER_S = 15.0


class ScheduleChecks:
    def __init__(
        self,
        adapter: SutAdapter,
        directory: CampaignDir,
        workload: str | None,
        run_config: RunConfig,
        *,
        patterns: tuple[LogPattern, ...] = DEFAULT_PATTERNS,
        check_time_limit: float = 60.0,
        stuck_after_s: float = STUCK_AFTER_S,
        leader_line: str = "",
    ) -> None:
        """`patterns`: the log oracle's built-in patterns; the lines the SUT itself names as
        bugs (an adapter that `DeclaresLogBugs`) come before them, so a line both match is
        called what the SUT says it means. `leader_line`: the regex of the line a node logs
        when it becomes leader, group `term` its term (a ProcessAdapter's `leader_line`;
        "" = no two-leaders check)."""
        self.adapter = adapter
        self.dir = directory
        self.workload = workload
        self.run_config = run_config
        self.patterns = (adapter.log_bugs if isinstance(adapter, DeclaresLogBugs) else ()) + patterns
        self.check_time_limit = check_time_limit
        self.stuck_after_s = stuck_after_s
        self.recorder: HistoryRecorder | None = None
        self._runner: WorkloadRunner | None = None
        self._thread: threading.Thread | None = None
        self._offsets: dict[Path, int] = {}
        #: client ops of the running schedule that completed ok (None: no workload)
        self._served: int | None = None
        #: when (monotonic) every fault of the running schedule was healed, None before
        self._healed_at: float | None = None
        #: set by the first ok completion after that
        self._served_after_heal = threading.Event()
        #: when the last workload stopped, on its history's clock (the stuck oracle's watch)
        self._watched_until: int | None = None
        self._leader_line = re.compile(leader_line) if leader_line else None

    # -- around a schedule ---------------------------------------------------------------

    def begin_schedule(self, index: int) -> None:
        self._watched_until = None
        self._offsets = {p: p.stat().st_size if p.exists() else 0 for p in self._log_paths()}
        self._healed_at = None
        self._served_after_heal.clear()
        self.start_workload(self.dir.fresh_run_dir(index), self.run_config.seed + index, key_slot=index + 1)

    def start_workload(self, run_dir: Path, seed: int, key_slot: int) -> None:
        """Run a fresh instance of the workload, on keys of its own slot, recording into
        run_dir, until stopped."""
        if self.workload is None:
            return
        workload = make_workload(self.workload, key_base=key_slot * KEYS_PER_SCHEDULE)
        self.recorder = HistoryRecorder.to_dir(run_dir, keep=False)
        self._served = 0
        self.recorder.add_listener(self._count_served)
        node_for = client_node_for(self.adapter)
        config = RunConfig(
            concurrency=self.run_config.concurrency,
            time_limit=_FOREVER_S,
            rate=self.run_config.rate,
            seed=seed,
        )
        self._runner = WorkloadRunner(workload, lambda w: self.adapter.client(node_for(w), workload), self.recorder, config)
        self._thread = threading.Thread(target=self._runner.run, name=f"workload-{run_dir.name}", daemon=True)
        self._thread.start()

    def _count_served(self, op: Any) -> None:
        if op.type == "ok":  # nemesis ops are :info
            self._served += 1
            if self._healed_at is not None:
                self._served_after_heal.set()

    def faults_healed(self) -> None:
        """Every fault of the schedule is healed: a `heal` nemesis op in the history (Jepsen's
        final heal; the stuck oracle measures from it), and the clock for the check's wait."""
        self.nemesis_op(HEAL)
        self._healed_at = time.monotonic()

    def nemesis_op(self, f: str, value: Any = None) -> None:
        """Record a fault in the schedule's history as Jepsen does (a :nemesis :info op)."""
        if self.recorder is not None:
            self.recorder.nemesis(f, value)

    def stop_workload(self) -> None:
        """Stop the background workload, if one runs: its history is then complete."""
        if self._runner is None:
            return
        self._runner.stop()
        if self._thread is not None:
            self._thread.join(30)
        self._watched_until = self.recorder.elapsed_ns()
        self.recorder.close()
        self._runner = self._thread = self.recorder = None

    def check_schedule(self, index: int, record: dict[str, Any]) -> list[BugEvidence]:
        """Stop the workload, check the schedule's history and node logs, write results.edn
        and the run's pictures; the evidence of each bug found, one per signature."""
        run_dir = self.dir.run_dir(index)
        self._await_service_after_heal()
        self.stop_workload()
        verdict = check_run_history_in_child(run_dir, self.check_time_limit)
        if verdict.error is not None:
            # A history the checker cannot read is a harness problem, not a finding about the
            # SUT; say so in the schedule's record and keep the campaign going.
            record["history"] = {"valid": "unknown", "error": verdict.error}
        elif verdict.result is not None:
            r = verdict.result
            record["history"] = {"valid": r.valid, "checker": r.checker, "anomalies": r.anomaly_types,
                                 "stats": r.stats}
        logged = self._schedule_logs(run_dir)
        node_findings = self._node_findings(logged, record) + self._cluster_findings(record, logged, verdict.ops)
        findings = (findings_from_result(verdict.result) if verdict.result else []) + node_findings
        record["checks"] = {"findings": len(findings), "run_dir": str(run_dir), "served": self._served}
        self._served = None
        # Jepsen's results.edn beside history.edn, so Jepsen's own tools read the run
        atomic_write(run_dir / "results.edn", results_edn(verdict.result, node_findings, verdict.error).encode())
        return [self._evidence(bug, index, run_dir) for bug in deduplicate(findings).values()]

    def _await_service_after_heal(self) -> None:
        """Before the workload stops: while no client op has succeeded since the faults
        were healed, wait until one does or `stuck_after_s` have passed since the heal, so
        the history shows whether the cluster came back (the stuck oracle reads it)."""
        if self._healed_at is None or self._runner is None:
            return
        self._served_after_heal.wait(max(0.0, self._healed_at + self.stuck_after_s - time.monotonic()))

    def _schedule_logs(self, run_dir: Path) -> list[tuple[str, Path, str]]:
        """(node, log file, what the schedule added to it) of every node's logs, each node's
        main process's first; the text is copied into run_dir/logs."""
        logs_dir = run_dir / "logs"
        logged = []
        for path, start in self._offsets.items():
            text = self._read_from(path, start)
            node = self._node_of(path)
            logged.append((node, path, text))
            if text:
                logs_dir.mkdir(exist_ok=True)
                (logs_dir / f"{node}-{path.name}").write_text(text)
        return logged

    def _node_findings(self, logged: list[tuple[str, Path, str]], record: dict[str, Any]) -> list[Finding]:
        """What the schedule's node logs and the nodes' processes show: log patterns, ASan
        reports, deaths by an unexpected signal (their backtraces symbolized): of the
        processes the reset found dead and restarted (their log up to the restart, from its
        report in `record`), and of those dead now."""
        findings: list[Finding] = []
        for node, _, text in logged:
            findings += scan_log(text.splitlines(), node, self.patterns)
            findings += parse_asan(text, node)
        main = _main_logs(logged)
        deaths: list[tuple[str, int | None, str]] = []
        for node, died in _reset_report(record).get("exited", {}).items():
            path = self.adapter.log_paths(node)[0]
            log = self._read_from(path, self._offsets.get(path, 0), died.get("log_end"))
            deaths.append((node, died.get("status"), log))
        for node in self.adapter.backend.nodes:
            proc = self.adapter.process(node) if isinstance(self.adapter, HasProcess) else None
            if proc is not None and not self.adapter.backend.is_running(proc):
                deaths.append((node, self.adapter.backend.wait(proc, 0), main.get(node, "")))
        for node, status, log in deaths:
            death = death_finding(status, node, log=log)
            if death is not None:
                death.details["backtrace"] = symbolize(death.details["backtrace"])
                findings.append(death)
        return findings

    def _cluster_findings(self, record: dict[str, Any], logged: list[tuple[str, Path, str]],
                          ops: list[Op]) -> list[Finding]:
        """What the nodes show together: two leaders in one term (their logs), replicas that
        applied different commands (asked now, after the reset), the one node the reset
        could not bring back (its report in `record`), a cluster stuck after the heal (the
        history's `ops`). What the replicas applied goes into `record["replicas"]`."""
        main = _main_logs(logged)
        findings: list[Finding] = []
        if self._leader_line is not None:
            findings += two_leaders_findings({node: leader_terms(text, self._leader_line) for node, text in main.items()})
        if isinstance(self.adapter, ReportsApplied):
            digests = self.adapter.applied_digests()
            record["replicas"] = {node: {str(i): d for i, d in applied.items()} for node, applied in digests.items()}
            findings += divergence_findings(digests)
        unready = _reset_report(record).get("unready", {})
        findings += cannot_restart_findings(unready, list(self.adapter.backend.nodes), main, self.patterns)
        findings += stuck_findings(ops, self.stuck_after_s, self._watched_until)
        return findings

    def _log_paths(self) -> list[Path]:
        return [p for node in self.adapter.backend.nodes for p in self.adapter.log_paths(node)]

    def _node_of(self, path: Path) -> str:
        for node in self.adapter.backend.nodes:
            if path in self.adapter.log_paths(node):
                return node
        return "?"

    @staticmethod
    def _read_from(path: Path, start: int, end: int | None = None) -> str:
        """The text of `path` from byte `start` (to byte `end`, when given)."""
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = start if start <= size else 0  # a truncated (rotated) log starts over
            f.seek(start)
            return f.read(-1 if end is None else max(0, end - start)).decode("utf-8", errors="replace")

    @staticmethod
    def _evidence(bug: Bug, index: int, run_dir: Path) -> BugEvidence:
        finding = bug.first
        report = {
            "oracle": finding.oracle,
            "kind": finding.kind,
            "message": finding.message,
            "node": finding.node,
            "details": finding.details,
            "schedule": index,
        }
        return BugEvidence(bug.signature, report, [run_dir], bug.sighting())

    def close(self) -> None:
        self.stop_workload()


def _reset_report(record: dict[str, Any]) -> dict[str, Any]:
    """The schedule's reset report as its record holds it (nemesis.nemesis.ResetReport's
    JSON), {} when it has none."""
    reset = record.get("reset")
    return reset if isinstance(reset, dict) else {}


def _main_logs(logged: list[tuple[str, Path, str]]) -> dict[str, str]:
    """node -> what its main process logged during the schedule (its log comes first)."""
    main: dict[str, str] = {}
    for node, _, text in logged:
        main.setdefault(node, text)
    return main
