"""An Elle-style cycle as a graph: the transactions of a cycle on a circle, in cycle order,
each dependency an arrow labelled with its relation (Elle draws the same as Graphviz).

The input is a cycle case as the transactional checkers explain it
(`mallory.oracles.txn`): {"type": "G-single-item", "cycle": [{"from": 3, "rel": "rw",
"to": 7, "op": {"process": 1, "index": 40, "type": "ok", "line": 41}, "mops": "..."}, ...]}.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

from mallory.pictures.svg import document, num, text

#: the colour of each relation's arrows (Elle's: ww blue, wr green, rw red)
REL_COLOURS = {"ww": "#1f77b4", "wr": "#2ca02c", "rw": "#d62728", "process": "#9467bd", "realtime": "#ff7f0e"}
NODE_R = 24
SPACING = 110  # arc length between neighbouring transactions on the circle
MARGIN = 60


def _point(steps: int, i: int, radius: float, centre: tuple[float, float]) -> tuple[float, float]:
    angle = -math.pi / 2 + 2 * math.pi * i / steps  # the first transaction on top, then clockwise
    return centre[0] + radius * math.cos(angle), centre[1] + radius * math.sin(angle)


def _toward(a: tuple[float, float], b: tuple[float, float], distance: float) -> tuple[float, float]:
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    return a[0] + dx / length * distance, a[1] + dy / length * distance


def _edge(a: tuple[float, float], b: tuple[float, float], centre: tuple[float, float],
          bend: float) -> tuple[str, str, tuple[float, float]]:
    """A curved arrow from circle a to circle b, bent away from the centre (so the two
    arrows between the same pair, in a cycle of two, bend to either side): its path, its
    arrowhead and the point where its label goes."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    nx, ny = dy / length, -dx / length
    mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
    if (mid[0] - centre[0]) * nx + (mid[1] - centre[1]) * ny < 0:
        nx, ny = -nx, -ny
    control = (mid[0] + nx * bend * length, mid[1] + ny * bend * length)
    start, end = _toward(a, control, NODE_R), _toward(b, control, NODE_R + 1)
    tip, back = end, _toward(end, control, 9)
    ux, uy = (tip[0] - back[0]) / 9, (tip[1] - back[1]) / 9
    head = (f"{num(tip[0])},{num(tip[1])} {num(back[0] - uy * 4)},{num(back[1] + ux * 4)} "
            f"{num(back[0] + uy * 4)},{num(back[1] - ux * 4)}")
    path = f"M{num(start[0])},{num(start[1])} Q{num(control[0])},{num(control[1])} {num(back[0])},{num(back[1])}"
    label = (0.25 * a[0] + 0.5 * control[0] + 0.25 * b[0], 0.25 * a[1] + 0.5 * control[1] + 0.25 * b[1])
    return path, head, label


def _describe(step: Mapping[str, Any]) -> str:
    op = step.get("op") or {}
    where = f"line {op['line']}" if op.get("line") is not None else f"op {op.get('index', '?')}"
    return f"T{step['from']}: process {op.get('process', '?')}, {where} ({op.get('type', '?')}): {step.get('mops', '')}"


def cycle_svg(case: Mapping[str, Any]) -> str:
    """The cycle of `case` as an <svg>: a <g class="txn" data-txn> per transaction (hover:
    its process, op and micro-ops) and a <g class="dep" data-rel data-from data-to> per
    dependency, its relation written beside the arrow."""
    steps = case["cycle"]
    title = f"{case.get('type', 'cycle')}: a cycle of {len(steps)} transactions"
    radius = max(70.0, SPACING * len(steps) / (2 * math.pi))
    height = 2 * (radius + MARGIN)
    width = max(height, 7 * len(title) + 16)  # room for the title
    centre = (width / 2, height / 2)
    where = {step["from"]: _point(len(steps), i, radius, centre) for i, step in enumerate(steps)}
    bend = 0.3 if len(steps) == 2 else 0.12
    body = []
    for step in steps:
        rel = step["rel"]
        colour = REL_COLOURS.get(rel, "#555")
        path, head, (lx, ly) = _edge(where[step["from"]], where[step["to"]], centre, bend)
        body.append(
            f'<g class="dep" data-rel="{escape(rel)}" data-from="{step["from"]}" data-to="{step["to"]}">'
            f"<title>T{step['from']} {escape(rel)} T{step['to']}</title>"
            f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
            f'<polygon points="{head}" fill="{colour}"/>'
            + text(lx, ly + 4, rel, text_anchor="middle", fill=colour, font_weight="bold",
                   stroke="#fff", stroke_width="3", paint_order="stroke")
            + "</g>"
        )
    for step in steps:
        x, y = where[step["from"]]
        process = (step.get("op") or {}).get("process", "?")
        body.append(
            f'<g class="txn" data-txn="{step["from"]}"><title>{escape(_describe(step))}</title>'
            f'<circle cx="{num(x)}" cy="{num(y)}" r="{NODE_R}" fill="#f4f4f4" stroke="#333"/>'
            + text(x, y, f"T{step['from']}", text_anchor="middle", font_weight="bold")
            + text(x, y + 12, f"p{process}", text_anchor="middle", font_size="9", fill="#555")
            + "</g>"
        )
    return document("cycle", width, height, [text(8, 16, title, font_weight="bold"), *body], title)
