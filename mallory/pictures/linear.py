"""Where a register history stops being linearizable, drawn as Knossos' linear.svg and
Porcupine's visualiser do: processes as lanes, each operation a bar from its invocation
to its completion (on the history's positions, its real-time order), the ops of the
longest linearizable prefix numbered in the order they were linearized, the op that
cannot be placed after them in red, and a line where its completion leaves no choice.

The input is the linearizability checker's case (`mallory.oracles.linearizability`):
"around" (the ops near the point, with "call", "ret", "process", "op", "status",
"linearized", "stuck"), "prefix_length", "state_after_prefix", "stuck_op".
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from mallory.pictures.svg import document, num, text

LEFT = 90
WIDTH = 860
TOP = 58
LANE_H = 46
OPEN_TAIL = 40  # how far past the last position an op that never completed reaches
COLOURS = {"linearized": "#8fd19e", "stuck": "#e45756", "not-linearized": "#d9d9d9"}


def _status(op: Mapping[str, Any]) -> str:
    if op.get("stuck"):
        return "stuck"
    return "not-linearized" if op.get("linearized") is None else "linearized"


def _lane_order(processes: set[Any]) -> list[Any]:
    return sorted(processes, key=lambda p: (not isinstance(p, int), str(p) if not isinstance(p, int) else p))


def linear_svg(case: Mapping[str, Any]) -> str:
    """The case's ops around the stuck point as an <svg>: a <g class="op" data-status
    ("linearized", "stuck", "not-linearized") data-process data-index> per op, a
    <line class="stuck-point"> at the stuck op's completion."""
    ops = case["around"]
    lanes = {p: i for i, p in enumerate(_lane_order({op["process"] for op in ops}))}
    low = min(op["call"] for op in ops)
    high = max(max(op["call"], op["ret"] or 0) for op in ops)
    scale = WIDTH / max(1, high - low)

    def x(position: float) -> float:
        return LEFT + (position - low) * scale

    height = TOP + LANE_H * len(lanes) + 36
    width = LEFT + WIDTH + OPEN_TAIL + 20
    stuck = next(op for op in ops if op.get("stuck"))
    title = (f"not linearizable: after {case.get('prefix_length', '?')} ops linearized (green, numbered in their "
             f"order) the state is {case.get('state_after_prefix', '?')}; {stuck['op']} (red) cannot be placed")
    body = [text(8, 16, title, font_weight="bold")]
    for process, row in lanes.items():
        y = TOP + LANE_H * row + LANE_H / 2
        body.append(f'<line x1="{LEFT}" y1="{num(y)}" x2="{num(width - 10)}" y2="{num(y)}" stroke="#eee"/>'
                    + text(8, y + 4, f"process {process}", font_weight="bold"))
    if stuck["ret"] is not None:
        sx = x(stuck["ret"])
        body.append(f'<line class="stuck-point" x1="{num(sx)}" y1="{TOP - 14}" x2="{num(sx)}" y2="{num(height - 30)}" '
                    'stroke="#e45756" stroke-dasharray="5,3"/>'
                    + text(sx - 4, TOP - 4, "no linearization past here", fill="#b00", font_size="10",
                           text_anchor="end"))
    for op in ops:
        status = _status(op)
        y = TOP + LANE_H * lanes[op["process"]] + LANE_H / 2
        x0 = x(op["call"])
        x1 = x(op["ret"]) if op["ret"] is not None else LEFT + WIDTH + OPEN_TAIL
        order = "" if op.get("linearized") is None else f"#{op['linearized'] + 1} "
        words = f"{order}{op['op']}"
        span = f"positions {op['call']}–{op['ret']}" if op["ret"] is not None else f"from position {op['call']}, never completed"
        hover = f"process {op['process']}: {op['op']} ({op['status']}), {span}, {status}"
        outline = ' stroke-dasharray="4,2"' if op["ret"] is None else ""
        body.append(
            f'<g class="op" data-status="{status}" data-process="{escape(str(op["process"]))}" data-index="{op["index"]}">'
            f"<title>{escape(hover)}</title>"
            f'<rect x="{num(x0)}" y="{num(y - 8)}" width="{num(max(3.0, x1 - x0))}" height="16" rx="3" '
            f'fill="{COLOURS[status]}" stroke="#555"{outline}/>'
            + text(x0 + 2, y - 11, words, font_size="10")
            + "</g>"
        )
    body.append(text(LEFT, height - 10, "position in the history (real-time order) →", fill="#555", font_size="10"))
    return document("linear", width, height, body, title)
