"""Jepsen's latency-raw plot of one run: every client operation a dot at the time it was
invoked and the latency until it completed (log scale), coloured by outcome (ok, fail,
info), with the periods when faults were in force shaded.

Faults come from the history's nemesis ops (`mallory.history.ops.NEMESIS`'s :info ops,
one per fault the campaign took, named by its action): a fault lasts from its op until
an op that heals or stops (f `heal` or `stop`, or starting with `heal-`/`stop-`, as
Jepsen's `stop-partition`) or the end of the history (a campaign's reset heals
everything). `noop` starts nothing; the same fault named twice in a row (Jepsen writes a
pair per fault) is one period.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from mallory.history.ops import Op, pair_calls
from mallory.pictures.svg import document, nice_ticks, num, text

COLOURS = {"ok": "#4c78a8", "info": "#f58518", "fail": "#e45756"}
LEFT = 64
PLOT_W = 820
PLOT_H = 260
ROW_H = 13  # one row of fault labels above the plot
LEGEND_W = 150


@dataclass(frozen=True)
class FaultPeriod:
    """A fault in force from `start_ns` to `end_ns` (history times)."""

    label: str
    start_ns: int
    end_ns: int


def _ends_faults(f: str) -> bool:
    return f in ("heal", "stop") or f.startswith(("heal-", "stop-"))


def fault_periods(ops: Sequence[Op]) -> list[FaultPeriod]:
    """The fault periods of a history (see the module doc); nemesis ops without a time
    are skipped."""
    end = max((op.time for op in ops if op.time is not None), default=0)
    periods: list[FaultPeriod] = []
    active: dict[str, int] = {}
    for op in ops:
        if op.is_client or op.time is None or op.f is None:
            continue
        f = str(op.f)
        if _ends_faults(f):
            periods += [FaultPeriod(label, start, op.time) for label, start in active.items()]
            active = {}
        elif f != "noop":
            active.setdefault(f, op.time)
    periods += [FaultPeriod(label, start, end) for label, start in active.items()]
    return sorted(periods, key=lambda p: (p.start_ns, p.label))


def latency_svg(ops: Sequence[Op], source: str = "<history>") -> str | None:
    """The latency-raw plot of a history as an <svg>, or None when no client op has both
    an invocation and a completion time. One <path class="points" data-type data-count>
    per outcome (a dot per op), a <rect class="fault" data-fault> per fault period.
    Raises HistoryError (`source` names the history) when its calls do not pair up."""
    points: dict[str, list[tuple[float, float]]] = {}
    never = 0
    for call in pair_calls(ops, source=source):
        if call.done is None:
            never += 1
        elif call.invoke.time is not None and call.done.time is not None:
            latency_ms = max(1e-3, (call.done.time - call.invoke.time) / 1e6)
            points.setdefault(str(call.done.type), []).append((call.invoke.time / 1e9, latency_ms))
    if not points:
        return None
    periods = fault_periods(ops)
    t_end = max(op.time for op in ops if op.time is not None) / 1e9  # the x axis spans the whole history
    latencies = [ms for pts in points.values() for _, ms in pts]
    decade_low = math.floor(math.log10(min(latencies)))
    decade_high = max(decade_low + 1, math.ceil(math.log10(max(latencies))))

    def x(seconds: float) -> float:
        return LEFT + seconds / max(t_end, 1e-9) * PLOT_W

    spans = [(x(p.start_ns / 1e9), x(p.end_ns / 1e9)) for p in periods]
    # a label takes about 6 px a character; it may run past its period
    rows = _label_rows([(x0, max(x1, x0 + 6 * len(p.label) + 8)) for (x0, x1), p in zip(spans, periods)])
    top = 30 + ROW_H * (max(rows, default=-1) + 1)
    width, height = LEFT + PLOT_W + LEGEND_W, top + PLOT_H + 44

    def y(ms: float) -> float:
        return top + PLOT_H - (math.log10(ms) - decade_low) / (decade_high - decade_low) * PLOT_H

    title = "Latency of every client operation by when it was invoked, faults shaded"
    body = [text(8, 16, title, font_weight="bold")]
    for period, (x0, x1), row in zip(periods, spans, rows):
        label = escape(period.label)
        body.append(
            f'<rect class="fault" data-fault="{label}" x="{num(x0)}" y="{top}" width="{num(max(1.0, x1 - x0))}" '
            f'height="{PLOT_H}" fill="#d62728" fill-opacity="0.12"><title>{label}: '
            f'{period.start_ns / 1e9:.2f}–{period.end_ns / 1e9:.2f} s</title></rect>'
            + text(x0 + 2, 28 + ROW_H * row, period.label, fill="#700", font_size="10")
        )
    body.append(f'<rect x="{LEFT}" y="{top}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#999"/>')
    for tick in nice_ticks(0, t_end):
        body.append(f'<line x1="{num(x(tick))}" y1="{top + PLOT_H}" x2="{num(x(tick))}" y2="{top + PLOT_H + 4}" stroke="#999"/>'
                    + text(x(tick), top + PLOT_H + 16, f"{tick:g}", text_anchor="middle", font_size="10"))
    for decade in range(decade_low, decade_high + 1):
        ms = 10.0 ** decade
        body.append(f'<line x1="{LEFT}" y1="{num(y(ms))}" x2="{LEFT + PLOT_W}" y2="{num(y(ms))}" stroke="#eee"/>'
                    + text(LEFT - 6, y(ms) + 4, f"{ms:g}", text_anchor="end", font_size="10"))
    body.append(text(LEFT + PLOT_W / 2, height - 8, "time since the history started (s)", text_anchor="middle"))
    body.append(text(14, top + PLOT_H / 2, "latency (ms)", text_anchor="middle",
                     transform=f"rotate(-90 14 {num(top + PLOT_H / 2)})"))
    legend_y = top + 10
    for kind in [k for k in COLOURS if k in points] + sorted(set(points) - set(COLOURS)):
        pts, colour = points[kind], COLOURS.get(kind, "#777")
        dots = "".join(f"M{num(x(t))},{num(y(ms))}h0" for t, ms in pts)
        body.append(f'<path class="points" data-type="{kind}" data-count="{len(pts)}" d="{dots}" stroke="{colour}" '
                    'stroke-width="4" stroke-linecap="round" stroke-opacity="0.7" fill="none"/>')
        body.append(f'<circle cx="{LEFT + PLOT_W + 18}" cy="{num(legend_y - 4)}" r="4" fill="{colour}"/>'
                    + text(LEFT + PLOT_W + 28, legend_y, f"{kind} ({len(pts)})"))
        legend_y += 16
    if never:
        body.append(text(LEFT + PLOT_W + 12, legend_y, f"{never} never completed", fill="#555", font_size="10"))
    return document("latency", width, height, body, title)


def _label_rows(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each label, given the x extent each takes (in order of start), so that
    labels in one row do not overlap."""
    ends: list[float] = []  # per row, where its last label ends
    rows = []
    for x0, x1 in spans:
        row = next((i for i, end in enumerate(ends) if end <= x0), len(ends))
        if row == len(ends):
            ends.append(x1)
        ends[row] = x1
        rows.append(row)
    return rows
