"""Undoing one network fault while others are active on the same links.

The firewall keeps one rule per link (drop, delay, copies); `heal` clears the whole rule.
So a drop (partition, packet drop, a promote to a cut-off node) is lifted only on the links
no other active drop holds, and the delays and duplications other active faults put on
those links are put back; a delay or a duplication is undone by setting just that part to
zero. What a fault does to its links is its `link_effect`: by its family, or, for a fault
of another family that also acts on links, its params' `link_effect` (with `ms` for a
delay, `copies` for a duplication).
"""

from __future__ import annotations

from nemesis.faults.base import FaultContext, FaultReport

DROPPING = ("partition", "drop")


def link_effect(report: FaultReport) -> str | None:
    """What the fault does to its links: "drop", "delay", "duplicate", or None."""
    if report.family in DROPPING:
        return "drop"
    if report.family in ("delay", "duplicate"):
        return report.family
    return report.params.get("link_effect")


def _links(report: FaultReport) -> set[tuple[str, str]]:
    return {tuple(link.split("->")) for link in report.links}  # type: ignore[misc]


def _others(ctx: FaultContext, report: FaultReport) -> list[FaultReport]:
    return [r for r in ctx.active if r is not report and not r.healed]


def packets_affected(ctx: FaultContext, report: FaultReport) -> dict[str, int]:
    """How many packets the firewall's rules acted on, per link of the report, so far (a
    link shared with another fault counts that fault's packets too)."""
    mine = set(report.links)
    return {f"{r['src']}->{r['dst']}": r.get("affected", 0) for r in ctx.mediator.rules() if f"{r['src']}->{r['dst']}" in mine}


def lift_drop(ctx: FaultContext, report: FaultReport) -> dict:
    """Lift a drop fault's links; the mediator's answer plus what was kept or put back."""
    affected = packets_affected(ctx, report)
    others = _others(ctx, report)
    held = set().union(*(_links(r) for r in others if link_effect(r) == "drop"))
    free = sorted(_links(report) - held)
    answer = ctx.mediator.heal(free) if free else {"links": []}
    restored = []
    for other in others:
        again = sorted(_links(other) & set(free))
        if not again:
            continue
        if link_effect(other) == "delay":
            ctx.mediator.delay(again, other.params["ms"])
        elif link_effect(other) == "duplicate":
            ctx.mediator.duplicate(again, other.params["copies"])
        else:
            continue
        restored.append(other.action)
    return {"mediator_links": answer["links"], "packets_affected": affected,
            "kept_by_other_faults": sorted(f"{s}->{d}" for s, d in _links(report) & held), "restored": restored}


def lift_packet(ctx: FaultContext, report: FaultReport) -> dict:
    """Undo a delay or a duplication: that part of the links' rules back to zero (another
    active fault of the same kind on a link keeps it)."""
    affected = packets_affected(ctx, report)
    effect = link_effect(report)
    held = set().union(*(_links(r) for r in _others(ctx, report) if link_effect(r) == effect))
    free = sorted(_links(report) - held)
    if not free:
        return {"mediator_links": [], "packets_affected": affected}
    if effect == "delay":
        answer = ctx.mediator.delay(free, 0)
    else:
        answer = ctx.mediator.duplicate(free, 0)
    return {"mediator_links": answer["links"], "packets_affected": affected}
