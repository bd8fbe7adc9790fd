"""Membership changes through the SUT adapter, when it has the abilities: promote (make a
random non-primary node the primary; healed by promoting the previous primary back; needs
an adapter that is `Promotable` and `HasPrimaries`) and remove (take a random node out of
the membership; healed by adding it back; needs `Membership`). Other SUTs are refused
(today: Redis replication can promote; etcd and raft-kv can do both).
"""

from __future__ import annotations

import random

from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, Membership, Promotable
from nemesis.faults.base import FaultContext, FaultReport, check_spec

MEMBERSHIP_SPECS = ("promote", "remove")


class MembershipFaults:
    family = "membership"
    specs = MEMBERSHIP_SPECS

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if spec == "promote" and not (isinstance(ctx.adapter, Promotable) and isinstance(ctx.adapter, HasPrimaries)):
            return f"{ctx.adapter.name} cannot promote a node and name its primaries"
        if spec == "remove" and not isinstance(ctx.adapter, Membership):
            return f"{ctx.adapter.name} cannot remove and add members"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        reason = self.unsupported(ctx, spec)
        if reason is not None:
            raise MalloryError(f"membership:{spec} refused: {reason}")
        running = [n for n in ctx.nodes if ctx.adapter.is_running(n)]
        report = FaultReport(action=f"membership:{spec}", family=self.family, spec=spec)
        if spec == "promote":
            before = ctx.adapter.primaries()
            candidates = [n for n in running if n not in before]
            if not candidates:
                report.evidence = {"reason": "no running non-primary node", "primaries": before}
                report.verified = True
                return report
            node = rng.choice(candidates)
            ctx.adapter.promote(node)
            after = ctx.adapter.primaries()
            report.nodes = [node]
            report.params = {"previous_primaries": before}
            report.evidence = {"primaries_before": before, "primaries_after": after}
            report.verified = node in after
            return report
        node = rng.choice(running or ctx.nodes)
        ctx.adapter.remove_member(node)
        report.nodes = [node]
        report.evidence = {"removed": node}
        report.verified = True  # adapters offer no membership read-back: the call's success
        return report

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        if report.spec == "promote" and report.nodes:
            previous = [n for n in report.params["previous_primaries"] if ctx.adapter.is_running(n)]
            if previous:
                ctx.adapter.promote(previous[0])
            report.heal_evidence = {"primaries": ctx.adapter.primaries()}
        elif report.spec == "remove":
            for node in report.nodes:
                ctx.adapter.add_member(node)
        report.healed = True
