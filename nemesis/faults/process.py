"""Process faults through the SUT adapter, with Jepsen's node specs: kill (SIGKILL), stop
(a graceful stop: the SUT's stop signal, SIGKILL if it outlasts the adapter's stop
timeout), both healed by starting the node again without waiting for it to be ready; and
pause (SIGSTOP; healed by SIGCONT).

Covers every SUT whose adapter is `Killable` (kill), `Stoppable` (stop) or `Pausable`
(pause); `:primaries` needs one that `HasPrimaries`. The evidence is read from /proc, not
from the adapter, where it shows its process (`HasProcess`): a killed or stopped node's
process is gone (or a zombie), a paused one is in state T. A stop's evidence also says, per
node, whether the process exited by itself within the stop timeout or was killed after it,
how long that took and its exit status.
"""

from __future__ import annotations

import random
from dataclasses import asdict

from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.adapter import (
    HasPrimaries,
    HasProcess,
    Killable,
    Pausable,
    Stoppable,
)
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.targets import NODE_SPECS, pick_nodes

#: the process fault families, each with the ability its adapter needs
ABILITIES: dict[str, type] = {"kill": Killable, "stop": Stoppable, "pause": Pausable}
#: the families that end the SUT's process (healed by starting it again)
ENDING = ("kill", "stop")
#: the families whose heal brings a node back (a restart or a resume): healed last
RESTORING = tuple(ABILITIES)


def sut_pid(ctx: FaultContext, node: str) -> int | None:
    """The pid of the node's SUT process, None when unknown (not started, or an adapter
    that does not show its process: then /proc evidence is simply absent)."""
    proc = ctx.adapter.process(node) if isinstance(ctx.adapter, HasProcess) else None
    return None if proc is None else proc.pid


class ProcessFaults:
    """`kind` is "kill", "stop" or "pause": the family name and the label's first word."""

    specs = NODE_SPECS

    def __init__(self, kind: str) -> None:
        if kind not in ABILITIES:
            raise MalloryError(f"process fault kind {kind!r}: use {', '.join(ABILITIES)}")
        self.family = kind

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if not isinstance(ctx.adapter, ABILITIES[self.family]):
            return f"{ctx.adapter.name} cannot {self.family} a node"
        if spec == "primaries" and not isinstance(ctx.adapter, HasPrimaries):
            return f"{ctx.adapter.name} cannot tell which nodes are primaries"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        primaries = ctx.adapter.primaries() if spec == "primaries" else []
        targets = pick_nodes(spec, ctx.nodes, rng, primaries)
        report = FaultReport(action=f"{self.family}:{spec}", family=self.family, spec=spec)
        states: dict[str, str | None] = {}
        skipped: dict[str, str] = {}
        stops: dict[str, dict | None] = {}
        for node in targets:
            if not ctx.adapter.is_running(node):
                skipped[node] = "not running"
                continue
            pid = sut_pid(ctx, node)
            if self.family == "kill":
                ctx.adapter.kill(node)
            elif self.family == "stop":
                outcome = ctx.adapter.stop(node)
                stops[node] = None if outcome is None else asdict(outcome)
            else:
                if pid is not None and proc_state(pid) in ("T", "t"):
                    skipped[node] = "already paused"
                    continue
                ctx.adapter.pause(node)
            report.nodes.append(node)
            report.params.setdefault("pids", {})[node] = pid
            if pid is not None:
                states[node] = proc_state(pid)
            elif self.family in ENDING:  # no pid to look at: the adapter's word, said so
                states[node] = "adapter: running" if ctx.adapter.is_running(node) else "adapter: not running"
            else:
                states[node] = "unknown"  # a pause cannot be verified without the pid
        want = (None, "Z", "adapter: not running") if self.family in ENDING else ("T", "t")
        report.evidence = {"proc_state": states, "skipped": skipped, "targets": targets}
        if self.family == "stop":
            report.evidence["stop"] = stops  # per node: exited_by_itself, seconds, status
        report.verified = all(s in want for s in states.values())
        return report

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        result: dict[str, str | None] = {}
        for node in report.nodes:
            if self.family in ENDING:
                # Started, not awaited: a node may not get ready while other faults last
                # (a replica cut off from its primary); reset waits for readiness.
                if not ctx.adapter.is_running(node):
                    ctx.adapter.start(node)
                pid = sut_pid(ctx, node)
                result[node] = f"started, pid {pid} {proc_state(pid) if pid else None}"
            else:
                pid = report.params["pids"][node]
                if ctx.adapter.is_running(node) and sut_pid(ctx, node) == pid:
                    ctx.adapter.resume(node)
                result[node] = proc_state(pid) if pid is not None else None
        report.heal_evidence = {"nodes": result}
        report.healed = True
