"""The nemesis's `stop` fault (graceful: SIGTERM, SIGKILL after the spec's 5 s) through
raft-kv while it is busy: clients keep a list-append workload in flight and a snapshot is
taken every 8 entries, so SIGTERM's `raft_close` cancels in-flight appends and snapshots.
The stopped servers exit by themselves, within the stop timeout: with status 0, "stopped"
their last line, nothing the log oracle or the death oracle would flag; or by SIGSEGV inside
libraft's raft_close (a libraft 0.15 bug this fault finds, about one stop in four here; the
core shows it under raft_close, called from raft-kv's SIGTERM handler), which the death
oracle reports. The heal restarts them, and the history checks under Elle: a stop loses
nothing acknowledged. On loopback: no root."""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path

import pytest

from mallory.harness.adapter import Stoppable
from mallory.harness.runner import RunConfig
from mallory.harness.session import record_run, start_all, teardown_all
from mallory.harness.workload import make_workload
from mallory.history.ops import read_history
from mallory.oracles.elle import check_elle
from mallory.oracles.logs import DEFAULT_PATTERNS, death_finding, scan_log
from nemesis.faults.base import FaultContext
from nemesis.nemesis import Nemesis
from tests.live.raft_kv import raft_cluster as rc
from tests.live.stack import free_ports, loopback_with_rings

pytestmark = pytest.mark.timeout(240)


def test_a_stop_fault_runs_sigterm_through_raft_kv_while_it_is_busy(binary: Path, tmp_path: Path) -> None:
    with loopback_with_rings() as backend:
        sut = rc.adapter(backend, binary, "--snapshot-threshold", "8", "--snapshot-trailing", "4",
                         ports=tuple(free_ports(2)))
        assert isinstance(sut, Stoppable) and sut.stop_timeout == 5
        nemesis = Nemesis(FaultContext(backend=backend, adapter=sut), enabled=["stop"])
        assert {"stop:primaries", "stop:all"} <= set(nemesis.actions())
        try:
            start_all(sut)
            rc.wait_leader(sut)
            run = tmp_path / "run"
            config = RunConfig(concurrency=4, time_limit=8.0, rate=300)
            worker = threading.Thread(target=record_run, args=(sut, make_workload("list-append"), config, run))
            worker.start()
            reports = []
            try:
                threading.Event().wait(1.5)  # clients in flight, snapshots taken
                for label in ("stop:primaries", "stop:all"):
                    applied_before = {n: int(sut.status(n).get("applied", 0)) for n in backend.nodes}
                    report = nemesis.enact(label, random.Random(3))
                    reports.append(report)
                    assert report.verified, report.evidence
                    assert report.nodes, (label, report.evidence)
                    if label == "stop:all":
                        assert report.nodes == list(backend.nodes)
                    for node in report.nodes:
                        stopped = report.evidence["stop"][node]
                        assert stopped["exited_by_itself"] and stopped["status"] in (0, -signal.SIGSEGV), (node, stopped)
                        assert stopped["seconds"] < sut.stop_timeout
                        assert applied_before[node] > 0  # it was applying entries when stopped
                    nemesis.heal(report)
                    for node in backend.nodes:
                        sut.wait_ready(node, 30)
                    rc.wait_leader(sut, 20)
                    threading.Event().wait(1.0)  # busy again before the next stop
            finally:
                worker.join(60)
            _, history = read_history(run / "history.edn")
            assert sum(1 for op in history if op.type == "ok") > 20
            result = check_elle(history, "list-append")
            assert result.valid is True, result.explanation
            for report in reports:
                for node in report.nodes:
                    text = rc.log_text(sut, node)
                    status = report.evidence["stop"][node]["status"]
                    assert "signal 15: closing raft" in text
                    assert scan_log(text.splitlines(), node, sut.log_bugs + DEFAULT_PATTERNS) == []
                    if status == 0:
                        assert f"[raft-kv {sut.raft_address(node)}] stopped\n" in text
                        assert death_finding(status, node, log=text) is None
                    else:  # libraft crashed in raft_close: a bug, and the death oracle says so
                        assert death_finding(status, node, log=text) is not None
            assert sum(rc.log_text(sut, n).count("snapshot taken: ") for n in backend.nodes) >= 3
        finally:
            teardown_all(sut)
