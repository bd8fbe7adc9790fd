"""The nemesis: the fault catalogue of one campaign, offered to the learner as actions.

Built from the enabled fault families and their specs (per campaign: `enabled` takes
labels like "partition" for a whole family or "kill:one" for one spec; default: every
family but the OPT_IN ones, round faults and Poisson crashes). Labels a SUT/cluster cannot receive are refused: asked for explicitly, they raise
MalloryError with the reason; under the default they are left out and listed in `refused`.

    actions()          the learner's labels: "partition:majority", "kill:one", ..., "noop"
    enact(label, rng)  enact one fault; its FaultReport (with the evidence it took effect)
    one_window(report) whether that fault lasts its step's window only (filter sets)
    heal(report)       undo that fault
    reset()            heal everything, clear clock/disk controls, resume paused and
                       restart dead nodes, then check the cluster is healthy
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.adapter import HasProcess, Pausable, Stoppable
from nemesis.faults.base import (
    Armed,
    FaultContext,
    FaultFamily,
    FaultReport,
    HasBackgroundWork,
    LastsOneWindow,
)
from nemesis.faults.clock import ClockFaults
from nemesis.faults.crashes import DEFAULT_CRASH_RATE, PoissonCrashFaults
from nemesis.faults.disk import DiskFaults
from nemesis.faults.filters import FilterSetFaults
from nemesis.faults.membership import MembershipFaults
from nemesis.faults.packet import PacketFaults
from nemesis.faults.partition import PartitionFaults
from nemesis.faults.process import RESTORING, ProcessFaults, sut_pid
from nemesis.faults.rounds import DEFAULT_D, DEFAULT_DROP_P, DEFAULT_K, RoundFaults

NOOP = "noop"
SETTLE_S = 0.5
#: how long a reset waits for each further node once one did not come back: every node
#: has had the whole ready timeout by then, and a healthy one answers at once
AFTER_FAILURE_S = 2.0


#: families offered only when named (`--faults rounds`) or by the policy that drives them
#: (`--policy rounds`, `random-drop`, `poisson-crash`): each fault is a whole window's
#: schedule of faults drawn by a sampler (round_schedule.py), not one more choice for the
#: learner, whose default catalogue stays the one its measurements were made with
OPT_IN = ("rounds", "crash")
#: families whose heal brings a node back: healed last (see heal_all)
RESTORING_FAMILIES = (*RESTORING, "crash")


def default_families() -> list[FaultFamily]:
    """The families a campaign offers unless told otherwise (OPT_IN ones are not here)."""
    return [
        PartitionFaults(),
        ProcessFaults("kill"),
        ProcessFaults("stop"),
        ProcessFaults("pause"),
        PacketFaults("delay"),
        PacketFaults("drop"),
        PacketFaults("duplicate"),
        ClockFaults(),
        DiskFaults(),
        MembershipFaults(),
    ]


def schedule_families(window_s: float = 2.5, d: int = DEFAULT_D, k: int = DEFAULT_K, drop_p: float = DEFAULT_DROP_P,
                      crash_rate: float = DEFAULT_CRASH_RATE) -> list[FaultFamily]:
    """The OPT_IN families, each fault covering one step window of `window_s`: round faults
    ((d, k) lossy-synchronous rounds, random drop with probability `drop_p`) and Poisson
    crashes (`crash_rate` per second)."""
    return [RoundFaults(window_s, d, k, drop_p), PoissonCrashFaults(window_s, crash_rate)]


def all_families() -> list[FaultFamily]:
    """Every family, the OPT_IN ones with their default settings."""
    return [*default_families(), *schedule_families()]


def expand_faults(families: Mapping[str, FaultFamily], enabled: Sequence[str] | None) -> list[tuple[str, str]]:
    """(family, spec) of every fault `enabled` names, families or single labels (every
    fault of `families` but the OPT_IN ones when None; `noop` names none); MalloryError for
    a name no family knows, listing those it does."""
    if enabled is None:
        return [(f.family, s) for f in families.values() if f.family not in OPT_IN for s in f.specs]
    out = []
    for label in enabled:
        family, _, spec = label.partition(":")
        if family == NOOP:
            continue
        if family not in families:
            raise MalloryError(f"unknown fault family {family!r} in {label!r} (families: {', '.join(families)})")
        specs = families[family].specs
        if spec and spec not in specs:
            raise MalloryError(f"unknown spec {spec!r} in {label!r} ({family} specs: {', '.join(specs)})")
        out += [(family, s) for s in ([spec] if spec else specs) if (family, s) not in out]
    return out


def check_fault_names(enabled: Sequence[str], extra: Sequence[FaultFamily] = ()) -> None:
    """Refuse, before any cluster comes up, a fault name the catalogue (with the `extra`
    families of this campaign: its filter sets) does not know (whether the SUT can take a
    known one is asked of its adapter, once it exists)."""
    expand_faults({f.family: f for f in [*all_families(), *extra]}, enabled)


@dataclass
class ResetReport:
    """What a reset did, and what keeps the cluster from being healthy (`problems`).
    `exited`: the nodes it found dead and restarted, node -> {"status": the dead process's
    exit status (negative: the signal that ended it), "log_end": the size of its main log
    then, where what the dead process wrote ends}. `unready`: the nodes it could not bring
    back, node -> {"how": "start-failed", "exited" (before it was ready) or "not-ready"
    (running, not ready in time), "message": the adapter's words}."""

    healed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    exited: dict[str, dict[str, int | None]] = field(default_factory=dict)
    unready: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"healed": self.healed, "resumed": self.resumed, "restarted": self.restarted,
                "problems": self.problems, "exited": self.exited, "unready": self.unready, "healthy": self.healthy}


class Nemesis:
    def __init__(self, ctx: FaultContext, enabled: list[str] | None = None, families: list[FaultFamily] | None = None) -> None:
        self.ctx = ctx
        self.families = {f.family: f for f in (families or all_families())}
        self.refused: dict[str, str] = {}
        self.active: list[FaultReport] = ctx.active  # shared: a heal consults the others
        self._labels: list[str] = []
        explicit = enabled is not None
        for family, spec in expand_faults(self.families, enabled):
            label = f"{family}:{spec}"
            reason = self._unsupported(family, spec)
            if reason is None:
                self._labels.append(label)
            elif explicit and label in enabled:
                raise MalloryError(f"fault {label} refused: {reason}")
            else:
                self.refused[label] = reason
        for name, family in self.families.items():
            if isinstance(family, Armed):
                specs = [label.partition(":")[2] for label in self._labels if label.partition(":")[0] == name]
                if specs:
                    family.arm(ctx, specs)

    def _unsupported(self, family: str, spec: str) -> str | None:
        try:
            return self.families[family].unsupported(self.ctx, spec)
        except MalloryError as exc:
            return str(exc)

    # -- what the learner sees -------------------------------------------------------------

    def actions(self) -> list[str]:
        return [*self._labels, NOOP]

    def enact(self, label: str, rng: random.Random) -> FaultReport:
        if label == NOOP:
            return FaultReport(action=NOOP, family=NOOP, spec="", verified=True, healed=True)
        if label not in self._labels:
            reason = self.refused.get(label, "not enabled in this campaign")
            raise MalloryError(f"fault {label}: {reason}")
        family, _, spec = label.partition(":")
        report = self.families[family].enact(self.ctx, spec, rng)
        self.active.append(report)
        return report

    def one_window(self, report: FaultReport) -> bool:
        family = self.families.get(report.family)
        return isinstance(family, LastsOneWindow) and family.lasts_one_window(report)

    def heal(self, report: FaultReport) -> None:
        if report.action == NOOP or report.healed:
            return
        self.families[report.family].heal(self.ctx, report)
        if report in self.active:
            self.active.remove(report)

    def heal_all(self, reports: list[FaultReport]) -> list[str]:
        """Heal `reports`, the latest first and restarts/resumes last (a node must not come
        back under a disk or clock fault, and network faults go first so it can become
        ready). A heal that cannot be done now is returned as a problem; its fault stays
        active for the reset to try again."""
        problems = []
        for report in sorted(reversed(reports), key=lambda r: r.family in RESTORING_FAMILIES):
            try:
                self.heal(report)
            except MalloryError as exc:
                problems.append(f"healing {report.action}: {exc}")
        return problems

    # -- reset -------------------------------------------------------------------------------

    def reset(self) -> ResetReport:
        ctx = self.ctx
        out = ResetReport()
        self._heal_faults(out)
        for node in ctx.nodes:
            pid = sut_pid(ctx, node)
            if ctx.adapter.is_running(node):
                if pid is not None and isinstance(ctx.adapter, Pausable) and proc_state(pid) in ("T", "t"):
                    ctx.adapter.resume(node)
                    out.resumed.append(node)
                continue
            dead = ctx.adapter.process(node) if isinstance(ctx.adapter, HasProcess) else None
            if dead is not None:  # how it died is for the checks' death oracle to judge
                log = ctx.adapter.log_paths(node)[0]
                out.exited[node] = {"status": ctx.adapter.backend.wait(dead, 0),
                                    "log_end": log.stat().st_size if log.exists() else 0}
            try:
                ctx.adapter.start(node)
                out.restarted.append(node)
            except MalloryError as exc:
                out.unready[node] = {"how": "start-failed", "message": str(exc)}
                out.problems.append(str(exc))
        # A node resumed after its peers restarted may answer "ready" from stale state for
        # a moment (a replica's link to a primary that has since died): check twice.
        for attempt in range(2 if (out.resumed or out.restarted or out.healed) else 1):
            if attempt:
                time.sleep(SETTLE_S)
            self._wait_ready(out)
        out.problems += self.health_problems()
        return out

    def _wait_ready(self, out: ResetReport) -> None:
        """Wait for every node `out` does not already count unready; each one that does not
        get ready goes to `out.unready` (once one was waited for in vain, the others get
        AFTER_FAILURE_S)."""
        ctx = self.ctx
        for node in ctx.nodes:
            if node in out.unready:
                continue
            waited_in_vain = any(why["how"] != "start-failed" for why in out.unready.values())
            try:
                ctx.adapter.wait_ready(node, min(ctx.ready_timeout, AFTER_FAILURE_S) if waited_in_vain else ctx.ready_timeout)
            except MalloryError as exc:
                how = "not-ready" if ctx.adapter.is_running(node) else "exited"
                out.unready[node] = {"how": how, "message": str(exc)}
                out.problems.append(str(exc))

    def _heal_faults(self, out: ResetReport) -> None:
        """Heal every active fault, stop the families' background work (clock strobes), clear
        the fault controls and the mediator's rules; what could not be healed goes to
        `out.problems`."""
        ctx = self.ctx
        pending = list(self.active)
        out.problems += self.heal_all(pending)
        out.healed += [r.action for r in pending if r not in self.active]
        self.active.clear()  # what could not be healed is given up: the reset is final
        for family in self.families.values():
            if isinstance(family, HasBackgroundWork):
                family.stop_background_work()
        if ctx.controls is not None:
            ctx.controls.clear_all()
        if ctx.mediator is not None:
            try:
                ctx.mediator.heal()
            except MalloryError as exc:
                out.problems.append(str(exc))
        filters = self.families.get("filters")
        if isinstance(filters, FilterSetFaults):
            out.problems += filters.clear(ctx)

    def restart_all(self, *, fresh: bool = False) -> ResetReport:
        """Stop every node (gracefully, SIGKILL after the SUT's timeout) and start it again:
        for a cluster that the reset left unhealthy, or that served no client at all (a SUT
        can be wedged with every process running, e.g. after losing its unsynced state).
        The faults are healed first, but no node is waited for before the stop: a wedged
        cluster would spend the whole ready timeout there for nothing. An adapter that is
        not `Stoppable` is left as it is, with that as the report's problem.

        `fresh`: every node is torn down instead (killed, its data removed: the adapter's
        `teardown`, which every adapter has) and starts as a new cluster does."""
        ctx = self.ctx
        out = ResetReport()
        self._heal_faults(out)
        out.problems = []  # what the restart leaves is checked below
        if fresh:
            for node in ctx.nodes:
                ctx.adapter.teardown(node)
        elif not isinstance(ctx.adapter, Stoppable):
            out.problems.append(f"{ctx.adapter.name} cannot stop a node, so it cannot restart one")
            return out
        else:
            for node in ctx.nodes:
                if ctx.adapter.is_running(node):
                    ctx.adapter.stop(node)
        for node in ctx.nodes:
            ctx.adapter.start(node)
            out.restarted.append(node)
        for node in ctx.nodes:
            try:
                ctx.adapter.wait_ready(node, ctx.ready_timeout)
            except MalloryError as exc:
                out.problems.append(str(exc))
        out.problems += self.health_problems()
        return out

    def health_problems(self) -> list[str]:
        """What keeps the cluster from being healthy: dead or paused nodes, firewall rules,
        clock offsets or disk faults still in force."""
        ctx = self.ctx
        problems = []
        for node in ctx.nodes:
            pid = sut_pid(ctx, node)
            if not ctx.adapter.is_running(node):
                problems.append(f"{node} is not running")
            elif pid is not None and proc_state(pid) in ("T", "t"):
                problems.append(f"{node} is paused")
        if ctx.mediator is not None:
            try:
                rules = ctx.mediator.rules()
            except MalloryError as exc:
                rules = []
                problems.append(str(exc))
            if rules:
                problems.append(f"firewall rules left: {rules}")
        filters = self.families.get("filters")
        if isinstance(filters, FilterSetFaults):
            problems += filters.health_problems(ctx)
        if ctx.controls is not None:
            for node in ctx.nodes:
                if ctx.controls.clock and ctx.controls.clock_offset(node) != 0.0:
                    problems.append(f"{node}'s clock is still offset")
                if ctx.controls.disk and ctx.controls.disk_state(node).mode != 0:
                    problems.append(f"{node}'s disk fault is still on")
        return problems

