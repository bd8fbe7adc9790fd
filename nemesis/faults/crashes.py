"""Poisson crashes, the crash baseline of the lossy-synchronous round faults: during one
window, crashes arrive as a Poisson process of `rate` per second over the cluster; each
kills (SIGKILL) a node drawn among those up, which is started again one round later (the
SUT's round length, as for rounds.py) or when the window ends (round_schedule.poisson_crashes).

Spec `crash:poisson`. Covers every SUT whose adapter is `Killable`. `enact` draws the
crashes (`params["crashes"]`: when, which node, when back) and leaves them to a background
thread; `evidence["done"]` gains a line per kill and start as it happens (the node's
process state read from /proc where the adapter shows it). A new fault of the family
first ends the one before it; ending one (heal, reset) starts every node it killed that is
not running.
"""

from __future__ import annotations

import random
import threading
import time

from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.adapter import Killable
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.process import sut_pid
from nemesis.faults.round_schedule import Crash, poisson_crashes
from nemesis.faults.rounds import JOIN_S, round_length

#: crashes per second over the cluster, by default (one every 5 s on average)
DEFAULT_CRASH_RATE = 0.2


class _CrashThread(threading.Thread):
    """Kills and starts the nodes of `crashes` at their times; stopped, or at the end,
    starts every node it killed that is not running."""

    def __init__(self, ctx: FaultContext, report: FaultReport, crashes: list[Crash], started: float) -> None:
        super().__init__(name="poisson-crashes", daemon=True)
        self.ctx, self.report, self.started = ctx, report, started
        moments = [(c.at_s, 0, "kill", c.node) for c in crashes] + [(c.back_s, 1, "start", c.node) for c in crashes]
        self.moments = sorted(moments)  # a start due with a kill goes after it
        self.stop_event = threading.Event()
        self.killed: set[str] = set()

    def run(self) -> None:
        try:
            for at_s, _, what, node in self.moments:
                if self.stop_event.wait(max(0.0, self.started + at_s - time.monotonic())):
                    break
                self._do(what, node)
        finally:
            for node in sorted(self.killed):
                self._do("start", node)

    def _do(self, what: str, node: str) -> None:
        adapter = self.ctx.adapter
        line: dict = {"what": what, "node": node, "at_s": round(time.monotonic() - self.started, 3)}
        try:
            if what == "kill":
                if not adapter.is_running(node):
                    line["skipped"] = "not running"
                else:
                    adapter.kill(node)
                    self.killed.add(node)
            elif node in self.killed:
                if not adapter.is_running(node):
                    adapter.start(node)
                self.killed.discard(node)
            else:
                return  # its kill was skipped: nothing to start
            pid = sut_pid(self.ctx, node)
            line["proc_state"] = proc_state(pid) if pid is not None else None
        except MalloryError as exc:  # a node that cannot start now: the reset tries again
            line["error"] = str(exc)
        self.report.evidence["done"].append(line)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(JOIN_S)


class PoissonCrashFaults:
    family = "crash"
    specs = ("poisson",)

    def __init__(self, window_s: float = 2.5, rate: float = DEFAULT_CRASH_RATE, downtime_s: float | None = None) -> None:
        """`window_s`: what one fault covers (the campaign's step window); `downtime_s`:
        how long a crashed node stays down (None: the SUT's round length)."""
        if not window_s > 0:
            raise MalloryError(f"crash: the window must be positive, got {window_s}")
        self.window_s, self.rate, self.downtime_s = window_s, rate, downtime_s
        self._threads: dict[int, _CrashThread] = {}

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if not isinstance(ctx.adapter, Killable):
            return f"{ctx.adapter.name} cannot kill a node"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        self.stop_background_work()  # one run of crashes at a time: the one before ends here
        downtime_s = round_length(ctx) if self.downtime_s is None else self.downtime_s
        crashes = poisson_crashes(rng, ctx.nodes, self.window_s, self.rate, downtime_s)
        report = FaultReport(
            action=f"crash:{spec}", family=self.family, spec=spec,
            nodes=sorted({c.node for c in crashes}),
            params={"rate": self.rate, "window_s": self.window_s, "downtime_s": downtime_s,
                    "crashes": [{"at_s": round(c.at_s, 3), "node": c.node, "back_s": round(c.back_s, 3)} for c in crashes]},
            evidence={"done": []},
        )
        thread = _CrashThread(ctx, report, crashes, time.monotonic())
        self._threads[id(report)] = thread
        thread.start()
        report.verified = thread.is_alive() or not crashes  # each kill's own evidence follows in `done`
        return report

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        thread = self._threads.pop(id(report), None)
        if thread is not None:
            thread.stop()
        done = report.evidence["done"]
        report.heal_evidence = {
            "killed": sum(1 for line in done if line["what"] == "kill" and "skipped" not in line and "error" not in line),
            "planned": len(report.params["crashes"]),
            "errors": [line["error"] for line in done if "error" in line],
        }
        report.healed = True

    def stop_background_work(self) -> None:
        """End every run of crashes now, its nodes started again (HasBackgroundWork)."""
        for thread in self._threads.values():
            thread.stop()
        self._threads.clear()
