"""Round faults, enacted by the gateway firewall: a step's window is cut into rounds of the
SUT's round length, and the links a round loses are dropped for that round only.

Specs (the schedules are drawn by round_schedule.py, which states the model and the bound):
    lossy-sync   at most d processes per round isolated or lossy, k rounds of recovery
    isolate      the same, isolations only
    random-drop  the baseline: every directed link dropped in every round with probability p

Rounds and steps. The round length is the SUT's (`ProcessAdapter.round_s`: a spec's
`[rounds] length`, else DEFAULT_ROUND_S) unless the family is given one. A fault covers one
window (`window_s`, the campaign's), cut into R = max(1, round(window_s / length)) rounds of
window_s / R each, so the rounds tile the windows and the steps of a schedule make one run
of rounds. `enact` draws the R rounds, enacts the first and checks the firewall took it; a
background thread enacts the others at their boundaries and lifts the last one's links when
the window is over. The drawn rounds are the report's `params["rounds"]` (each round's
links and, for lossy-sync, which process was faulty how); `evidence["applied"]` gains a
line per round as it is enacted. A new fault of the family first ends the one before it, and
starts its recovery where the one before left it (`params["recovery_after"]` of the latest
report of the family in force), so d and k hold across steps.

Packet level: a round's loss drops every packet of its links for the round. Over TCP a
dropped segment is sent again after the round, so a lost round shows as late messages (and
as what the SUT's timeouts make of them) more than as messages that never arrive; whole
messages are lost by a stream-aware layer, which the firewall does not have (issue 19).

Links shared with other faults: the report's `links` are the links its current round drops
(its link effect is "drop"), so a partition healed meanwhile keeps them; lifting a round's
link keeps those another fault drops and gives back another's delay or duplication
(links.lift_drop).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

from mallory.errors import MalloryError
from mallory.harness.adapter import DEFAULT_ROUND_S, ProcessAdapter
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.links import lift_drop
from nemesis.faults.round_schedule import (
    Round,
    lossy_sync_rounds,
    random_drop_rounds,
    recovery_after,
)
from nemesis.faults.targets import Link

ROUND_SPECS = ("lossy-sync", "isolate", "random-drop")
#: at most this many faulty processes per round, by default
DEFAULT_D = 1
#: rounds of recovery after a process was faulty, by default
DEFAULT_K = 1
#: the random-drop baseline's probability that a link loses a round, by default
DEFAULT_DROP_P = 0.2
#: how long a stopped round thread may take to lift its links
JOIN_S = 5.0


def round_length(ctx: FaultContext) -> float:
    """The SUT's round length in seconds (DEFAULT_ROUND_S for an adapter that names none)."""
    return ctx.adapter.round_s if isinstance(ctx.adapter, ProcessAdapter) else DEFAULT_ROUND_S


def tiling(window_s: float, length_s: float) -> tuple[int, float]:
    """How many rounds cover one window, and how long each is: the number nearest
    window_s / length_s (at least 1), stretched to fill the window."""
    rounds = max(1, round(window_s / length_s))
    return rounds, window_s / rounds


def link_names(links: Sequence[Link]) -> list[str]:
    return [f"{s}->{d}" for s, d in links]


def round_json(round_: Round) -> dict:
    return {"links": link_names(round_.links),
            "faulty": {f.node: f.how for f in round_.faults}}


class _RoundThread(threading.Thread):
    """Enacts rounds 1.. of `rounds` at their boundaries (round 0 is enacted already), then
    lifts the links of the last; stopped early, it lifts them at once."""

    def __init__(self, ctx: FaultContext, report: FaultReport, rounds: list[Round], length_s: float,
                 started: float) -> None:
        super().__init__(name="round-faults", daemon=True)
        self.ctx, self.report, self.rounds, self.length_s, self.started = ctx, report, rounds, length_s, started
        self.stop_event = threading.Event()

    def run(self) -> None:
        try:
            for index in range(1, len(self.rounds) + 1):
                due = self.started + index * self.length_s
                if self.stop_event.wait(max(0.0, due - time.monotonic())):
                    break
                if index < len(self.rounds):
                    enact_round(self.ctx, self.report, self.rounds[index].links, index, self.started)
            enact_round(self.ctx, self.report, (), len(self.rounds), self.started)
        except MalloryError as exc:  # the mediator refused or is gone: the reset clears its rules
            self.report.evidence["applied"].append({"round": None, "error": str(exc)})

    def stop(self) -> None:
        self.stop_event.set()
        self.join(JOIN_S)


def enact_round(ctx: FaultContext, report: FaultReport, links: Sequence[Link], index: int, started: float) -> bool:
    """Make `links` the ones `report` drops: drop those it did not drop yet, lift those it
    no longer drops (keeping what other faults hold); append the round's line to
    `evidence["applied"]`; whether the firewall answered with the links asked for."""
    old = {tuple(name.split("->")) for name in report.links}
    new = set(links)
    # the report holds its new links before the old ones are lifted: lift_drop keeps what
    # the faults in force hold, and this one no longer holds those
    report.links = link_names(sorted(new))
    answered = True
    if new - old:
        wanted = sorted(new - old)
        answered = sorted(ctx.mediator.drop(wanted)["links"]) == sorted(link_names(wanted))
    if old - new:
        lift_drop(ctx, FaultReport(action=report.action, family="drop", spec="", links=link_names(sorted(old - new))))
    report.evidence["applied"].append({"round": index, "at_s": round(time.monotonic() - started, 3),
                                       "links": list(report.links), "answered": answered})
    return answered


class RoundFaults:
    family = "rounds"
    specs = ROUND_SPECS

    def __init__(self, window_s: float = 2.5, d: int = DEFAULT_D, k: int = DEFAULT_K, drop_p: float = DEFAULT_DROP_P,
                 round_s: float | None = None) -> None:
        """`window_s`: what one fault covers (the campaign's step window); `round_s`: the
        round length (None: the SUT's)."""
        if not window_s > 0 or (round_s is not None and not round_s > 0):
            raise MalloryError(f"rounds: window and round length must be positive, got {window_s}, {round_s}")
        self.window_s, self.d, self.k, self.drop_p, self.round_s = window_s, d, k, drop_p, round_s
        self._threads: dict[int, _RoundThread] = {}

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if ctx.mediator is None:
            return "no mediator to drop packets with"
        if len(ctx.nodes) < 2:
            return "round faults need at least two nodes"
        if spec != "random-drop" and self.d > len(ctx.nodes):
            return f"d = {self.d} faulty processes per round is more than the {len(ctx.nodes)} nodes"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        self.stop_background_work()  # one run of rounds at a time: the one before ends here
        count, length_s = tiling(self.window_s, self.round_s or round_length(ctx))
        params: dict = {"link_effect": "drop", "round_s": round(length_s, 6), "window_s": self.window_s}
        if spec == "random-drop":
            rounds = random_drop_rounds(rng, ctx.nodes, count, self.drop_p)
            params["p"] = self.drop_p
        else:
            recovering = self._recovering(ctx)
            rounds = lossy_sync_rounds(rng, ctx.nodes, count, self.d, self.k, spec, recovering)
            params.update(d=self.d, k=self.k, recovering=recovering,
                          recovery_after=recovery_after(rounds, ctx.nodes, self.k, recovering))
        params["rounds"] = [round_json(r) for r in rounds]
        report = FaultReport(action=f"rounds:{spec}", family=self.family, spec=spec, params=params,
                             nodes=sorted({f.node for r in rounds for f in r.faults}),
                             evidence={"applied": [], "dropped_before": ctx.mediator.metrics()["firewall"]["dropped"]})
        started = time.monotonic()
        report.verified = enact_round(ctx, report, rounds[0].links, 0, started)
        thread = _RoundThread(ctx, report, rounds, length_s, started)
        self._threads[id(report)] = thread
        thread.start()
        return report

    def _recovering(self, ctx: FaultContext) -> dict[str, int]:
        """Where the latest lossy-synchronous fault in force left its processes' recovery."""
        for report in reversed(ctx.active):
            if report.family == self.family and "recovery_after" in report.params:
                return dict(report.params["recovery_after"])
        return {}

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        thread = self._threads.pop(id(report), None)
        if thread is not None:
            thread.stop()
        if report.links:  # a thread that could not lift them (the mediator refused)
            enact_round(ctx, report, (), len(report.params["rounds"]), time.monotonic())
        applied = report.evidence["applied"]
        planned = len(report.params["rounds"])
        report.heal_evidence = {
            "rounds_planned": planned,
            "rounds_enacted": len({line["round"] for line in applied if line.get("round") is not None} & set(range(planned))),
            "unanswered": [line["round"] for line in applied if line.get("answered") is False],
            "errors": [line["error"] for line in applied if "error" in line],
            "dropped_during": ctx.mediator.metrics()["firewall"]["dropped"] - report.evidence["dropped_before"],
        }
        report.healed = True

    def stop_background_work(self) -> None:
        """End every run of rounds now, its links lifted (HasBackgroundWork)."""
        for thread in self._threads.values():
            thread.stop()
        self._threads.clear()
