"""The report's plots as PNG bytes (matplotlib's Agg canvas, no display, no pyplot state).

Each PNG carries what it draws: a `mallory-series` text chunk holding, for every line and
bar series, the x and y values read back from the plotted artists, so a reader (or a test)
can check a picture against the campaign's `plot_data` without reading pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import orjson
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from mallory.report.recording import LossPoint
from mallory.report.series import GroupCurve, Metric

SERIES_KEY = "mallory-series"


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(8, 3.4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _plotted(ax: Axes) -> list[dict]:
    """What the axes draw: every line and every bar series, from the artists themselves."""
    series = []
    for line in ax.get_lines():
        series.append({"label": line.get_label(), "kind": "line",
                       "x": [float(v) for v in line.get_xdata()], "y": [float(v) for v in line.get_ydata()]})
    for container in ax.containers:
        if isinstance(container, BarContainer):
            series.append({"label": container.get_label(), "kind": "bar",
                           "x": [float(p.get_x()) for p in container.patches],
                           "y": [float(p.get_height()) for p in container.patches]})
    return series


def _png(fig: Figure) -> bytes:
    series = []
    for i, ax in enumerate(fig.axes):
        plotted = _plotted(ax)
        if any(not s["label"].startswith("_") for s in plotted):
            if i == 0:
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            else:
                ax.legend(fontsize=8, loc="lower right")
        series += plotted
    buf = io.BytesIO()
    # no "Software" chunk: it names matplotlib by URL, and the report refers to nothing outside
    fig.savefig(buf, format="png", metadata={"Software": None, SERIES_KEY: orjson.dumps(series).decode()})
    return buf.getvalue()


def _empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="#777")


def cumulative_plot(metric: Metric, runs: dict[str, tuple[list[float], list[int]]]) -> bytes:
    """A count over time (distinct states: the paper's Figure 7), one step line per campaign."""
    fig, ax = _figure(f"{metric.name.capitalize()} over time", "campaign time (s)", metric.name)
    for label, (t, counts) in runs.items():
        ax.step(t, counts, where="post", label=label)
    if not runs:
        _empty(ax, "no steps recorded")
    return _png(fig)


def rate_plot(runs: dict[str, tuple[list[float], list[float]]], width_s: float) -> bytes:
    """New states per hour, per bin of `width_s` seconds, one line per campaign."""
    fig, ax = _figure(f"New states per hour ({width_s:g} s bins)", "campaign time (s)", "states / hour")
    for label, (starts, rates) in runs.items():
        ax.plot(starts, rates, marker="o", markersize=3, label=label)
    if not runs:
        _empty(ax, "no steps recorded")
    return _png(fig)


def overlay_plot(metric: Metric, curves: Sequence[GroupCurve], horizon_s: float) -> bytes:
    """A count's mean per group over its campaigns (seeds), with the min–max band."""
    fig, ax = _figure(f"{metric.name.capitalize()} by group (mean, min–max band; up to {horizon_s:.0f} s)",
                      "campaign time (s)", metric.name)
    for curve in curves:
        line, = ax.plot(curve.grid, curve.mean, label=f"{curve.group} (n={curve.runs})")
        ax.fill_between(curve.grid, curve.low, curve.high, alpha=0.2, color=line.get_color())
    return _png(fig)


def fault_mix_plot(starts: list[float], mix: dict[str, list[int]], width_s: float) -> bytes:
    """Steps per fault family in each bin, stacked."""
    fig, ax = _figure("Fault mix over time", "campaign time (s)", "steps")
    bottom = [0] * len(starts)
    for family, counts in mix.items():
        ax.bar(starts, counts, width=width_s * 0.9, bottom=bottom, align="edge", label=family)
        bottom = [b + c for b, c in zip(bottom, counts)]
    if not mix:
        _empty(ax, "no steps recorded")
    return _png(fig)


def feedback_plot(t: list[float], feedback_ms: list[float], late_t: list[float], late: list[int]) -> bytes:
    """Feedback latency of each step, and the cumulative number of late steps."""
    fig, ax = _figure("Feedback latency per step", "campaign time (s)", "feedback (ms)")
    ax.plot(t, feedback_ms, linestyle="none", marker=".", label="feedback ms")
    if late_t:
        twin = ax.twinx()
        twin.step(late_t, late, where="post", color="#d62728", label="late steps (cumulative)")
        twin.set_ylabel("late steps")
        twin.set_ylim(0, max(1, max(late)) * 1.1)
    if not t:
        _empty(ax, "no step had timely feedback")
    return _png(fig)


def loss_plot(loss: Sequence[LossPoint] | None, origin_ns: int | None) -> bytes:
    """Events the observers reported lost, cumulative per node (None: no recording to tell)."""
    fig, ax = _figure("Observer loss", "campaign time (s)", "events lost (cumulative)")
    totals: dict[str, tuple[list[float], list[int]]] = {}
    for point in sorted(loss or (), key=lambda p: p.real_ns):
        t, counts = totals.setdefault(point.node, ([], []))
        t.append((point.real_ns - (origin_ns or 0)) / 1e9)
        counts.append((counts[-1] if counts else 0) + point.lost)
    for node, (t, counts) in sorted(totals.items()):
        ax.step(t, counts, where="post", label=node)
    if loss is None:
        _empty(ax, "no event recording in the campaign directory")
    elif not totals:
        _empty(ax, "no observer reported a lost event")
    return _png(fig)


def read_series(png: bytes) -> list[dict]:
    """The series a PNG written here says it draws (its `mallory-series` text chunk)."""
    pos = 8
    while pos < len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            if key.decode("latin-1") == SERIES_KEY:
                return orjson.loads(value)
        pos += 12 + length
    raise ValueError("PNG has no mallory-series chunk")
