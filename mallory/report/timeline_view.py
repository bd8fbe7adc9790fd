"""The Lamport timeline of a slice as an SVG diagram (pure).

Nodes are horizontal lanes; an event is a dot at its Lamport timestamp's column (the
distinct Lamport values of the slice, ranked), so on each lane events are in their order
on that node and every message arrow (SEND -> RECV, both in the slice) points right,
labelled with the type names of the messages its packet starts when the SUT declares them
(mallory/observer/messages.py); faults are shaded spans across the lanes, from when they
were enacted to when they were healed.
Every element carries data attributes (node, index, Lamport value, kind) so that tools and
tests can read the diagram back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from mallory.timeline.builder import Committed
from mallory.timeline.event import Kind, message_part, message_types

LANE_H = 56
LEFT = 96
TOP = 16
BAND_H = 14
DX = 9
LABELLED = (Kind.FUNC, Kind.BLOCK, Kind.FAULT, Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE, Kind.LOG)
COLOURS = {
    Kind.FUNC: "#1f77b4",
    Kind.BLOCK: "#17becf",
    Kind.SEND: "#2ca02c",
    Kind.RECV: "#98df8a",
    Kind.CLIENT_INVOKE: "#9467bd",
    Kind.CLIENT_COMPLETE: "#c5b0d5",
    Kind.FAULT: "#d62728",
    Kind.LOG: "#8c564b",
}


@dataclass(frozen=True)
class FaultSpan:
    """A fault active from `start_ns` to `end_ns` on the common time axis."""

    label: str
    start_ns: int
    end_ns: int


def fault_spans(schedule: dict) -> list[FaultSpan]:
    """The faults of a schedule record: each lasts from its step's start until a `heal` step
    or the schedule's end (the reset heals everything). Refused faults did not happen."""
    end = schedule.get("ended_ns")
    steps = schedule.get("steps", [])
    if not isinstance(end, int) and steps:
        end = steps[-1].get("window_ns", [0, 0])[1]
    spans: list[FaultSpan] = []
    active: list[tuple[str, int]] = []
    for step in steps:
        action = step.get("action", "")
        t0 = step.get("window_ns", [None])[0]
        if not isinstance(t0, int):
            continue
        if action == "heal":
            spans += [FaultSpan(label, start, t0) for label, start in active]
            active = []
        elif action != "noop" and not step.get("refused"):
            report = step.get("report") if isinstance(step.get("report"), dict) else {}
            started = report.get("started_ns")
            nodes = ",".join(str(n) for n in report.get("nodes") or [])
            active.append((f"{action} {nodes}".strip(), started if isinstance(started, int) else t0))
    spans += [FaultSpan(label, start, int(end or start)) for label, start in active]
    return spans


def natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def lane_order(nodes: Sequence[str]) -> list[str]:
    """Cluster nodes in natural order (n2 before n10), the mediator's lane last."""
    return sorted(set(nodes), key=lambda n: (n == "mediator", natural_key(n)))


def ref(entry: Committed) -> str:
    """How the diagram names an entry: node#index (its position on its node)."""
    return f"{entry.event.node}#{entry.index}"


def messages(entries: Sequence[Committed]) -> list[tuple[Committed, Committed]]:
    """(SEND, RECV) pairs with both ends in the slice."""
    inside = {id(e) for e in entries}
    return [(e.send, e) for e in entries if e.send is not None and id(e.send) in inside]


def timeline_svg(
    entries: Sequence[Committed],
    name: Callable[[Committed], str],
    faults: Sequence[FaultSpan] = (),
    nodes: Sequence[str] = (),
) -> str:
    """The slice as an <svg> element to inline in HTML (no external references)."""
    lanes = lane_order([*nodes, *(e.event.node for e in entries)])
    row = {node: i for i, node in enumerate(lanes)}
    columns = {lam: i for i, lam in enumerate(sorted({e.lamport for e in entries}))}

    def x(entry: Committed) -> int:
        return LEFT + DX * (columns[entry.lamport] + 1)

    # each fault active in the slice gets a labelled band of its own above the lanes
    bands = []
    for span in faults:
        inside = [x(e) for e in entries if span.start_ns <= e.real_ns < span.end_ns]
        if inside:
            bands.append((span, min(inside) - DX // 2, max(inside) + DX // 2))
    bands.sort(key=lambda band: (band[1], band[0].label))
    top = TOP + BAND_H * len(bands)
    width = LEFT + DX * (len(columns) + 2) + 160
    height = top + LANE_H * len(lanes) + 20

    def y(node: str) -> int:
        return top + LANE_H * row[node] + LANE_H // 2

    out = [
        f'<svg class="timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="9">',
        '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#555"/></marker></defs>',
    ]
    for k, (span, x0, x1) in enumerate(bands):
        label = escape(span.label)
        band_y = 8 + BAND_H * k
        out.append(
            f'<rect class="fault" data-fault="{label}" x="{x0}" y="{band_y}" width="{x1 - x0}" height="{BAND_H - 2}" '
            f'fill="#d62728" fill-opacity="0.35"><title>{label}</title></rect>'
            f'<text class="fault-label" x="{x0 + 2}" y="{band_y + BAND_H - 5}" fill="#700">{label}</text>'
            f'<rect class="fault-shade" x="{x0}" y="{top}" width="{x1 - x0}" height="{LANE_H * len(lanes)}" '
            f'fill="#d62728" fill-opacity="0.07"/>'
        )
    for node in lanes:
        out.append(
            f'<g class="lane" data-node="{escape(node)}"><line x1="{LEFT}" y1="{y(node)}" x2="{width - 20}" '
            f'y2="{y(node)}" stroke="#bbb"/><text x="8" y="{y(node) + 4}" font-size="12" font-weight="bold">'
            f"{escape(node)}</text></g>"
        )
    for send, recv in messages(entries):
        x1, y1, x2, y2 = x(send), y(send.event.node), x(recv), y(recv.event.node)
        line = (f'<line class="msg" data-send="{ref(send)}" data-recv="{ref(recv)}" x1="{x1}" y1="{y1}" x2="{x2}" '
                f'y2="{y2}" stroke="#555" stroke-width="0.7" marker-end="url(#arrow)"')
        if message_types(send.event.data):
            label = escape(message_part(send.event.data))
            out.append(f'{line} data-message="{label}"><title>{label}</title></line>'
                       f'<text class="msg-label" x="{(x1 + x2) // 2 + 2}" y="{(y1 + y2) // 2}" font-size="7" '
                       f'fill="#555">{label}</text>')
        else:
            out.append(f"{line}/>")
    for entry in entries:
        e = entry.event
        label = name(entry)
        cx, cy = x(entry), y(e.node)
        out.append(
            f'<circle class="ev" data-node="{escape(e.node)}" data-index="{entry.index}" '
            f'data-lamport="{entry.lamport}" data-kind="{e.kind.name}" data-real-ns="{entry.real_ns}" cx="{cx}" '
            f'cy="{cy}" r="3" fill="{COLOURS.get(e.kind, "#777")}"><title>{escape(e.kind.name)} {escape(label)} '
            f"({ref(entry)}, L{entry.lamport})</title></circle>"
        )
        if e.kind in LABELLED:
            out.append(f'<text x="{cx + 2}" y="{cy - 6}" transform="rotate(-35 {cx + 2} {cy - 6})">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def tail_by_time(entries: Sequence[Committed], limit: int) -> list[Committed]:
    """At most about `limit` entries: the latest ones on the common time axis (everything
    from the limit-th latest time on), kept in their causal order."""
    if len(entries) <= limit:
        return list(entries)
    cutoff = sorted(e.real_ns for e in entries)[-limit]
    return [e for e in entries if e.real_ns >= cutoff]


def head_by_time(entries: Sequence[Committed], limit: int) -> list[Committed]:
    """At most about `limit` entries: the earliest ones (everything up to the limit-th
    earliest time), kept in their causal order."""
    if len(entries) <= limit:
        return list(entries)
    cutoff = sorted(e.real_ns for e in entries)[limit - 1]
    return [e for e in entries if e.real_ns <= cutoff]


@dataclass(frozen=True)
class Section:
    """A part of a schedule drawn on its own: one step's window, or the final reset."""

    label: str
    start_ns: int
    end_ns: int


def schedule_sections(schedule: dict) -> list[Section]:
    """Each step from its start to the next step's start (its window, then the learner's
    feedback and decision), the last step to its window's end, then the reset up to the
    schedule's end (where everything is healed, and where many bugs show). Contiguous: every
    event from the first step on is in exactly one section."""
    steps = []
    for step in schedule.get("steps", []):
        window = step.get("window_ns") or []
        if len(window) == 2 and all(isinstance(t, int) for t in window):
            refused = " (refused)" if step.get("refused") else ""
            steps.append((f"step {step.get('step')}: {step.get('action')}{refused}", window[0], window[1]))
    out = [Section(label, t0, steps[i + 1][1] if i + 1 < len(steps) else t1) for i, (label, t0, t1) in enumerate(steps)]
    end = schedule.get("ended_ns")
    if out and isinstance(end, int) and end > out[-1].end_ns:
        out.append(Section("reset", out[-1].end_ns, end))
    return out
