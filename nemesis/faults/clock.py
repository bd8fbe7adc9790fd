"""Clock faults per node: bump (jump the wall clock by a delta), strobe (flip between the
delta and the true time every period), reset (every clock back to true time).

Network namespaces share one kernel clock, so the fault is enacted in the SUT's process by
the preload shim (see controls.py): covers SUTs that read the time through libc and were
started with the controls' env (C/C++/Python SUTs: Redis, libraft servers, pysyncobj);
not statically linked ones (Go: etcd), which are refused. Only the wall clock moves
(CLOCK_REALTIME, gettimeofday, time): monotonic clocks are untouched, as with a real clock
jump. The offset is read back by running `date` in the node under the same env, and the
heal evidence counts the faked clock reads the node's processes made (`faked_reads`).
"""

from __future__ import annotations

import random
import threading
import time

from mallory.errors import MalloryError
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.preloaded import missing_library, run_with_env

CLOCK_SPECS = ("bump", "strobe", "reset")
#: read-back tolerance: the probe's own start-up time plus scheduling noise
TOLERANCE_S = 0.5


def jepsen_delta_ms(rng: random.Random) -> int:
    """Jepsen's bump: ±2^(2..18) ms, i.e. 4 ms to ~4.4 minutes, log-uniform."""
    return int(rng.choice([-1, 1]) * 2 ** (2 + rng.random() * 16))


def random_subset(nodes: list[str], rng: random.Random) -> list[str]:
    """A random non-empty subset, in cluster order (Jepsen's random-nonempty-subset)."""
    k = rng.randint(1, len(nodes))
    chosen = set(rng.sample(nodes, k))
    return [n for n in nodes if n in chosen]


def read_offset(ctx: FaultContext, node: str) -> float:
    """The node's wall clock as its SUT sees it, minus the controller's (seconds)."""
    t0 = time.time()
    result = run_with_env(ctx, node, ["date", "+%s.%N"])
    t1 = time.time()
    if result.returncode != 0:
        raise MalloryError(f"{node}: reading the faked clock failed: {result.stderr.strip()}")
    return float(result.stdout.strip()) - (t0 + t1) / 2


class _Strobe(threading.Thread):
    """Flips the nodes' offsets between delta and 0 every period until stopped or done."""

    def __init__(self, ctx: FaultContext, nodes: list[str], delta_s: float, period_s: float, duration_s: float) -> None:
        super().__init__(name="clock-strobe", daemon=True)
        self.ctx, self.nodes, self.delta_s, self.period_s = ctx, nodes, delta_s, period_s
        self.deadline = time.monotonic() + duration_s
        self.stop_event = threading.Event()
        self.flips = 0

    def run(self) -> None:
        on = True
        while not self.stop_event.wait(self.period_s) and time.monotonic() < self.deadline:
            on = not on
            for node in self.nodes:
                self.ctx.controls.set_clock(node, self.delta_s if on else 0.0)
            self.flips += 1
        for node in self.nodes:
            self.ctx.controls.set_clock(node, 0.0)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5.0)


class ClockFaults:
    family = "clock"
    specs = CLOCK_SPECS

    def __init__(self, strobe_duration_s: float = 10.0) -> None:
        self.strobe_duration_s = strobe_duration_s
        self._strobes: dict[int, _Strobe] = {}

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        return missing_library(ctx, "clock")

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        reason = missing_library(ctx, "clock")
        if reason is not None:
            raise MalloryError(f"clock:{spec} refused: {reason}")
        report = FaultReport(action=f"clock:{spec}", family=self.family, spec=spec)
        if spec == "reset":
            self.stop_background_work()
            report.nodes = [n for n in ctx.nodes if ctx.controls.clock_offset(n) != 0.0]
            for node in ctx.nodes:
                ctx.controls.set_clock(node, 0.0)
            measured = {n: round(read_offset(ctx, n), 3) for n in ctx.nodes}
            report.evidence = {"measured_offset_s": measured}
            report.verified = all(abs(v) < TOLERANCE_S for v in measured.values())
            return report
        nodes = random_subset(ctx.nodes, rng)
        report.nodes = nodes
        if spec == "bump":
            deltas = {n: jepsen_delta_ms(rng) / 1000 for n in nodes}
            for node, delta in deltas.items():
                ctx.controls.set_clock(node, delta)
            report.params = {"delta_s": deltas}
        else:
            delta = jepsen_delta_ms(rng) / 1000
            period_s = max(0.01, 2 ** (rng.random() * 10) / 1000)
            deltas = {n: delta for n in nodes}
            for node in nodes:
                ctx.controls.set_clock(node, delta)
            strobe = _Strobe(ctx, nodes, delta, period_s, self.strobe_duration_s)
            report.params = {"delta_s": delta, "period_s": round(period_s, 4), "duration_s": self.strobe_duration_s}
            measured = {n: round(read_offset(ctx, n), 3) for n in nodes}  # before the first flip
            strobe.start()
            self._strobes[id(report)] = strobe
            report.evidence = {"measured_offset_s": measured, "faked_reads_before": self._faked(ctx, nodes)}
            report.verified = all(abs(measured[n] - delta) < TOLERANCE_S + period_s for n in nodes)
            return report
        measured = {n: round(read_offset(ctx, n), 3) for n in nodes}
        report.evidence = {"measured_offset_s": measured, "faked_reads_before": self._faked(ctx, nodes)}
        report.verified = all(abs(measured[n] - deltas[n]) < TOLERANCE_S for n in nodes)
        return report

    @staticmethod
    def _faked(ctx: FaultContext, nodes: list[str]) -> dict[str, int]:
        return {n: ctx.controls.clock_faked(n) for n in nodes}

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        strobe = self._strobes.pop(id(report), None)
        if strobe is not None:
            strobe.stop()
            report.heal_evidence["flips"] = strobe.flips
        for node in report.nodes:
            ctx.controls.set_clock(node, 0.0)
        report.heal_evidence["faked_reads"] = {
            n: ctx.controls.clock_faked(n) - report.evidence.get("faked_reads_before", {}).get(n, 0) for n in report.nodes
        }
        report.healed = True

    def stop_background_work(self) -> None:
        """Stop every strobe (HasBackgroundWork)."""
        for strobe in self._strobes.values():
            strobe.stop()
        self._strobes.clear()
