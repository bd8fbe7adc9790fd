"""Membership changes through the SUT adapter, when it has the abilities.

- promote: make a random non-primary node the primary; healed by promoting the previous
  primary back. Needs an adapter that is `Promotable` and `HasPrimaries`.
- promote-cut-off, promote-paused, promote-lagging: the same transfer, asked for a node
  that cannot take it well: cut off from every other node (its links dropped by the
  mediator), paused (SIGSTOP), or lagging (every packet to and from it held `lag_ms` by the
  mediator, so its log falls behind while clients write). The transfer is expected to time
  out, which is the code these variants exercise. The evidence says whether the condition
  was in force, whether the SUT refused the transfer outright and whether it took anyway;
  the heal lifts the condition (leadership stays where the cluster put it). Cut-off and
  lagging need the mediator, paused a `Pausable` adapter.
- remove: take a random node out of the membership; healed by adding it back. Needs
  `Membership`.

Other SUTs are refused (today: Redis replication can promote; etcd and raft-kv can do
everything here). None of these is refused for a partition in force: a change the
cluster cannot take then is the SUT's to refuse (raft-kv, etcd: after a few seconds
without a leader, MalloryError; the step is recorded as refused).
"""

from __future__ import annotations

import random

from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, Membership, Pausable, Promotable
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.links import lift_drop, lift_packet
from nemesis.faults.process import sut_pid
from nemesis.faults.targets import complete_grudge, grudge_links

#: the promote variants: label -> what the target is made before the transfer is asked
HOBBLED = {"promote-cut-off": "cut-off", "promote-paused": "paused", "promote-lagging": "lagging"}
MEMBERSHIP_SPECS = ("promote", *HOBBLED, "remove")


class MembershipFaults:
    family = "membership"
    specs = MEMBERSHIP_SPECS

    def __init__(self, lag_ms: float = 300.0) -> None:
        #: how long the mediator holds each packet of a lagging node (each way)
        self.lag_ms = lag_ms

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if spec == "remove":
            return None if isinstance(ctx.adapter, Membership) else f"{ctx.adapter.name} cannot remove and add members"
        if not (isinstance(ctx.adapter, Promotable) and isinstance(ctx.adapter, HasPrimaries)):
            return f"{ctx.adapter.name} cannot promote a node and name its primaries"
        condition = HOBBLED.get(spec)
        if condition in ("cut-off", "lagging") and ctx.mediator is None:
            return "no mediator to cut or slow a node's links with"
        if condition in ("cut-off", "lagging") and len(ctx.nodes) < 2:
            return "a node's links need at least two nodes"
        if condition == "paused" and not isinstance(ctx.adapter, Pausable):
            return f"{ctx.adapter.name} cannot pause a node"
        return None

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        reason = self.unsupported(ctx, spec)
        if reason is not None:
            raise MalloryError(f"membership:{spec} refused: {reason}")
        running = [n for n in ctx.nodes if ctx.adapter.is_running(n)]
        report = FaultReport(action=f"membership:{spec}", family=self.family, spec=spec)
        if spec == "remove":
            node = rng.choice(running or ctx.nodes)
            ctx.adapter.remove_member(node)
            report.nodes = [node]
            report.evidence = {"removed": node}
            report.verified = True  # adapters offer no membership read-back: the call's success
            return report
        before = ctx.adapter.primaries()
        candidates = [n for n in running if n not in before]
        if not candidates:
            report.evidence = {"reason": "no running non-primary node", "primaries": before}
            report.verified = True
            return report
        node = rng.choice(candidates)
        report.nodes = [node]
        report.params = {"previous_primaries": before}
        if spec == "promote":
            ctx.adapter.promote(node)
            after = ctx.adapter.primaries()
            report.evidence = {"primaries_before": before, "primaries_after": after}
            report.verified = node in after
            return report
        condition, in_force = self._hobble(ctx, HOBBLED[spec], node, report)
        try:
            ctx.adapter.promote(node)
            refused = None
        except MalloryError as exc:  # the condition stays: the heal lifts it
            refused = str(exc)
        after = ctx.adapter.primaries()
        report.evidence = {"condition": condition, "primaries_before": before, "primaries_after": after,
                           "transfer_refused": refused, "took": node in after}
        report.verified = in_force and refused is None
        return report

    def _hobble(self, ctx: FaultContext, condition: str, node: str, report: FaultReport) -> tuple[dict, bool]:
        """Put `node` in `condition` (its links and parameters go into `report`, so links.py
        can lift them beside other faults'); what was done, and whether it is in force."""
        if condition == "paused":
            pid = sut_pid(ctx, node)
            ctx.adapter.pause(node)
            state = proc_state(pid) if pid is not None else None
            report.params["pid"] = pid
            return {"paused": node, "pid": pid, "proc_state": state}, state in ("T", "t")
        others = [n for n in ctx.nodes if n != node]
        links = grudge_links(complete_grudge([[node], others]))
        report.links = [f"{s}->{d}" for s, d in links]
        if condition == "cut-off":
            report.params["link_effect"] = "drop"
            answer = ctx.mediator.drop(links)
            in_force = {f"{r['src']}->{r['dst']}" for r in ctx.mediator.rules() if r["drop"]}
        else:
            report.params.update(link_effect="delay", ms=self.lag_ms)
            answer = ctx.mediator.delay(links, self.lag_ms)
            in_force = {f"{r['src']}->{r['dst']}" for r in ctx.mediator.rules() if r["delay_ms"] == self.lag_ms}
        held = set(report.links) <= in_force
        return {condition: node, "mediator_links": answer["links"], "rules_in_force": held}, held

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        condition = HOBBLED.get(report.spec)
        if report.spec == "promote" and report.nodes:
            previous = [n for n in report.params["previous_primaries"] if ctx.adapter.is_running(n)]
            if previous:
                ctx.adapter.promote(previous[0])
            report.heal_evidence = {"primaries": ctx.adapter.primaries()}
        elif report.spec == "remove":
            for node in report.nodes:
                ctx.adapter.add_member(node)
        elif condition == "paused" and report.nodes:
            node = report.nodes[0]
            if ctx.adapter.is_running(node) and sut_pid(ctx, node) == report.params["pid"]:
                ctx.adapter.resume(node)
            report.heal_evidence = {"resumed": node, "primaries": ctx.adapter.primaries()}
        elif condition == "cut-off" and report.nodes:
            report.heal_evidence = lift_drop(ctx, report)
        elif condition == "lagging" and report.nodes:
            report.heal_evidence = lift_packet(ctx, report)
        report.healed = True
