"""What runs around each schedule of a live campaign: the workload, and the checks after it.

At a schedule's start, `ScheduleChecks` notes where every node's logs end and starts the
client workload in the background, recording `runs/NNNNNN/history.edn` (+ `.jsonl`). At
its end it stops the workload, checks the history (the checker is inferred from the
workload: linearizability for registers, Elle-style for transactions) and draws its
verdict beside it (`check_run_history`), scans the log lines the schedule added for the
log patterns and AddressSanitizer reports, notices processes that died by an unexpected
signal, and writes Jepsen's `results.edn`. The findings are grouped by signature (a
history gives one whatever its anomalies; a log line seen twice is one), and each group
becomes `BugEvidence`; the campaign turns those into bundles (one per signature) and
sightings (one per schedule).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import BugEvidence
from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.harness.adapter import HasProcess, SutAdapter
from mallory.harness.history import HistoryRecorder
from mallory.harness.runner import RunConfig, WorkloadRunner
from mallory.harness.session import client_node_for
from mallory.harness.workload import make_workload
from mallory.history.ops import read_history
from mallory.log_lines import LogPattern
from mallory.oracles.asan import parse_asan
from mallory.oracles.check import CheckOptions, check_history
from mallory.oracles.logs import DEFAULT_PATTERNS, death_finding, scan_log
from mallory.oracles.result import CheckResult
from mallory.oracles.results_edn import results_edn
from mallory.oracles.triage import Bug, Finding, deduplicate, findings_from_result
from mallory.pictures.verdict import run_pictures

#: the longest run a schedule's workload may have; the campaign stops it at the schedule end
_FOREVER_S = 24 * 3600.0
#: each schedule's workload uses keys from its own range: a schedule's history is checked on
#: its own, so it must not read what an earlier schedule (on the same cluster) wrote
KEYS_PER_SCHEDULE = 1_000_000


@dataclass
class RunVerdict:
    """The history checker's answer on a run: its result, or why the history could not be
    checked (both None: the run recorded no history)."""

    result: CheckResult | None = None
    error: str | None = None


def check_run_history(run_dir: Path, time_limit: float) -> RunVerdict:
    """Check the history a run recorded (run_dir/history.edn) and write the pictures of its
    verdict beside it (`mallory.pictures.verdict.run_pictures`: its latency plot, each
    anomaly case's cycle or linearizability diagram)."""
    path = run_dir / "history.edn"
    if not path.exists() or path.stat().st_size == 0:
        return RunVerdict()
    try:
        fmt, ops = read_history(path)
        result = check_history(ops, fmt, CheckOptions(time_limit=time_limit), str(path))
        pictures = run_pictures(ops, result.anomalies, str(path))
    except MalloryError as exc:
        return RunVerdict(error=str(exc))
    for picture in pictures:
        atomic_write(run_dir / picture.name, picture.svg.encode())
    return RunVerdict(result)


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
    ) -> None:
        self.adapter = adapter
        self.dir = directory
        self.workload = workload
        self.run_config = run_config
        self.patterns = patterns
        self.check_time_limit = check_time_limit
        self.recorder: HistoryRecorder | None = None
        self._runner: WorkloadRunner | None = None
        self._thread: threading.Thread | None = None
        self._offsets: dict[Path, int] = {}
        #: client ops of the running schedule that completed ok (None: no workload)
        self._served: int | None = None

    # -- around a schedule ---------------------------------------------------------------

    def begin_schedule(self, index: int) -> None:
        self._offsets = {p: p.stat().st_size if p.exists() else 0 for p in self._log_paths()}
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
        self.recorder.close()
        self._runner = self._thread = self.recorder = None

    def check_schedule(self, index: int, record: dict[str, Any]) -> list[BugEvidence]:
        """Stop the workload, check the schedule's history and node logs, write results.edn
        and the run's pictures; the evidence of each bug found, one per signature."""
        run_dir = self.dir.run_dir(index)
        self.stop_workload()
        verdict = check_run_history(run_dir, self.check_time_limit)
        if verdict.error is not None:
            # A history the checker cannot read is a harness problem, not a finding about the
            # SUT; say so in the schedule's record and keep the campaign going.
            record["history"] = {"valid": "unknown", "error": verdict.error}
        elif verdict.result is not None:
            r = verdict.result
            record["history"] = {"valid": r.valid, "checker": r.checker, "anomalies": r.anomaly_types}
        node_findings = self._node_findings(run_dir)
        findings = (findings_from_result(verdict.result) if verdict.result else []) + node_findings
        record["checks"] = {"findings": len(findings), "run_dir": str(run_dir), "served": self._served}
        self._served = None
        # Jepsen's results.edn beside history.edn, so Jepsen's own tools read the run
        atomic_write(run_dir / "results.edn", results_edn(verdict.result, node_findings, verdict.error).encode())
        return [self._evidence(bug, index, run_dir) for bug in deduplicate(findings).values()]

    def _node_findings(self, run_dir: Path) -> list[Finding]:
        """What the schedule's node logs (copied into run_dir/logs) and the nodes' processes
        show: log patterns, ASan reports, deaths by an unexpected signal."""
        findings: list[Finding] = []
        logs_dir = run_dir / "logs"
        logged: dict[str, str] = {}  # node -> what its main process logged (log_paths: it comes first)
        for path, start in self._offsets.items():
            text = self._read_from(path, start)
            node = self._node_of(path)
            logged.setdefault(node, text)
            if text:
                logs_dir.mkdir(exist_ok=True)
                (logs_dir / f"{node}-{path.name}").write_text(text)
            findings += scan_log(text.splitlines(), node, self.patterns)
            findings += parse_asan(text, node)
        for node in self.adapter.backend.nodes:
            proc = self.adapter.process(node) if isinstance(self.adapter, HasProcess) else None
            if proc is not None and not self.adapter.backend.is_running(proc):
                status = self.adapter.backend.wait(proc, 0)
                death = death_finding(status, node, log=logged.get(node, ""))
                if death is not None:
                    findings.append(death)
        return findings

    def _log_paths(self) -> list[Path]:
        return [p for node in self.adapter.backend.nodes for p in self.adapter.log_paths(node)]

    def _node_of(self, path: Path) -> str:
        for node in self.adapter.backend.nodes:
            if path in self.adapter.log_paths(node):
                return node
        return "?"

    @staticmethod
    def _read_from(path: Path, start: int) -> str:
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(start if start <= size else 0)  # a truncated (rotated) log starts over
            return f.read().decode("utf-8", errors="replace")

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

