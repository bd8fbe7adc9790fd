"""Network partitions, enacted by the gateway firewall (the mediator drops the links).

Covers every SUT on a backend whose inter-node traffic crosses the mediator (netns, docker
compose). `partition:primaries` needs an adapter that `HasPrimaries`.
"""

from __future__ import annotations

import random

from mallory.harness.adapter import HasPrimaries
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.links import lift_drop
from nemesis.faults.targets import (
    PARTITION_SPECS,
    grudge_links,
    partition_degenerate,
    partition_grudge,
)


class PartitionFaults:
    family = "partition"
    specs = PARTITION_SPECS

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if ctx.mediator is None:
            return "no mediator to drop packets with"
        if spec == "primaries" and not isinstance(ctx.adapter, HasPrimaries):
            return f"{ctx.adapter.name} cannot tell which nodes are primaries"
        return partition_degenerate(spec, len(ctx.nodes))

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        primaries = ctx.adapter.primaries() if spec == "primaries" else []
        grudge = partition_grudge(spec, ctx.nodes, rng, primaries)
        links = grudge_links(grudge)
        report = FaultReport(
            action=f"partition:{spec}",
            family=self.family,
            spec=spec,
            nodes=sorted(n for n, g in grudge.items() if g),
            links=[f"{s}->{d}" for s, d in links],
            params={"grudge": {n: sorted(g) for n, g in sorted(grudge.items())}},
        )
        if not links:  # e.g. `primaries` while the SUT names none: nothing to cut
            report.evidence = {"reason": "no links to cut", "primaries": primaries}
            report.verified = True
            return report
        before = ctx.mediator.metrics()["firewall"]["dropped"]
        answer = ctx.mediator.drop(links)
        rules = {f"{r['src']}->{r['dst']}" for r in ctx.mediator.rules() if r["drop"]}
        report.evidence = {
            "mediator_links": answer["links"],
            "applied_us": answer.get("applied_us"),
            "dropped_before": before,
            "rules_in_force": sorted(rules & set(report.links)),
        }
        report.verified = set(report.links) <= rules and sorted(answer["links"]) == sorted(report.links)
        return report

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        if report.links:
            report.heal_evidence = lift_drop(ctx, report)
            report.heal_evidence["dropped_during"] = (
                ctx.mediator.metrics()["firewall"]["dropped"] - report.evidence.get("dropped_before", 0)
            )
        report.healed = True
