"""Packet faults on chosen links, enacted by the gateway firewall: delay (every packet held
`ms`, order kept), drop (every packet lost) and duplicate (`copies` extra copies).

Link specs: `one` (every link of one random node, both ways), `pair` (both ways between two
random nodes), `all`. Covers every SUT whose inter-node traffic crosses the mediator. This
kernel has no netem, and the firewall has no probabilistic loss: `drop` loses every packet
of the links (a cut of chosen links; the partitions are the Jepsen-named grudges).
"""

from __future__ import annotations

import random

from mallory.errors import MalloryError
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.links import lift_drop, lift_packet
from nemesis.faults.targets import link_spec_links

LINK_SPECS = ("one", "pair", "all")
COUNTER = {"delay": "delayed", "drop": "dropped", "duplicate": "duplicated"}


class PacketFaults:
    specs = LINK_SPECS

    def __init__(self, kind: str, delay_ms: float = 50.0, copies: int = 1) -> None:
        if kind not in COUNTER:
            raise MalloryError(f"packet fault kind {kind!r}: use {', '.join(COUNTER)}")
        self.family = kind
        self.delay_ms = delay_ms
        self.copies = copies

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if ctx.mediator is None:
            return "no mediator to act on packets with"
        if len(ctx.nodes) < 2:
            return "packet faults need at least two nodes"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        links = link_spec_links(spec, ctx.nodes, rng)
        counter = COUNTER[self.family]
        before = ctx.mediator.metrics()["firewall"][counter]
        if self.family == "delay":
            params: dict = {"ms": self.delay_ms}
            answer = ctx.mediator.delay(links, self.delay_ms)
        elif self.family == "duplicate":
            params = {"copies": self.copies}
            answer = ctx.mediator.duplicate(links, self.copies)
        else:
            params = {}
            answer = ctx.mediator.drop(links)
        wanted = [f"{s}->{d}" for s, d in links]
        in_force = {f"{r['src']}->{r['dst']}": r for r in ctx.mediator.rules()}
        ok = all(link in in_force for link in wanted)
        if self.family == "delay":
            ok = ok and all(in_force[link]["delay_ms"] == self.delay_ms for link in wanted if link in in_force)
        elif self.family == "duplicate":
            ok = ok and all(in_force[link]["copies"] == self.copies for link in wanted if link in in_force)
        else:
            ok = ok and all(in_force[link]["drop"] for link in wanted if link in in_force)
        return FaultReport(
            action=f"{self.family}:{spec}",
            family=self.family,
            spec=spec,
            nodes=sorted({n for link in links for n in link}),
            links=wanted,
            params=params,
            verified=ok and sorted(answer["links"]) == sorted(wanted),
            evidence={"mediator_links": answer["links"], "applied_us": answer.get("applied_us"), f"{counter}_before": before},
        )

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        counter = COUNTER[self.family]
        report.heal_evidence = lift_drop(ctx, report) if self.family == "drop" else lift_packet(ctx, report)
        report.heal_evidence[f"{counter}_during"] = (
            ctx.mediator.metrics()["firewall"][counter] - report.evidence[f"{counter}_before"]
        )
        report.healed = True
