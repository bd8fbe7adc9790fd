"""Time series for the report's plots, computed from `plot_data` rows (pure).

x is campaign time in seconds (plot_data's relative_time_s, which continues across resumes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mallory.report.campaign_data import PlotRow
from mallory.report.stats import Spread, spread


@dataclass(frozen=True)
class Metric:
    """A cumulative count plot_data records after every step, by its PlotRow field."""

    name: str  # what the page calls it
    field: str

    def of(self, row: PlotRow) -> int | None:
        """The count after the row's step; None if the campaign did not record it."""
        return getattr(row, self.field)

    def recorded(self, rows: Sequence[PlotRow]) -> bool:
        """Whether a campaign's rows hold this count (older campaigns lack some columns)."""
        return bool(rows) and all(self.of(r) is not None for r in rows)


STATES = Metric("distinct states", "distinct_states")
#: distinct happens-before pairs of code/log events: the campaign's event-pair coverage
PAIRS = Metric("pairs covered", "pairs_covered")
STEPS = Metric("steps done", "steps_done")


def over_time(rows: Sequence[PlotRow], metric: Metric) -> tuple[list[float], list[int]]:
    """The count after every step, starting from (0, 0); rows must have it recorded."""
    return [0.0, *(r.time_s for r in rows)], [0, *(metric.of(r) or 0 for r in rows)]


def bin_width(duration_s: float, bins: int = 12) -> float:
    """A bin width giving about `bins` bins, at least one second."""
    return max(1.0, duration_s / bins)


def states_per_hour(rows: Sequence[PlotRow], width_s: float) -> tuple[list[float], list[float]]:
    """New distinct states per hour in consecutive bins of `width_s` (bin starts, rates).

    A bin's count is the growth of distinct_states across it, so states found by an earlier
    incarnation of a resumed campaign are not counted twice.
    """
    if not rows or width_s <= 0:
        return [], []
    nbins = int(rows[-1].time_s // width_s) + 1
    growth = [0] * nbins
    previous = 0
    for r in rows:
        growth[int(r.time_s // width_s)] += r.distinct_states - previous
        previous = r.distinct_states
    return [i * width_s for i in range(nbins)], [g / width_s * 3600.0 for g in growth]


def fault_family(action: str) -> str:
    """`partition:majority` -> `partition`; heal and noop stay themselves."""
    return action.split(":", 1)[0] if action else "?"


def fault_mix(rows: Sequence[PlotRow], width_s: float) -> tuple[list[float], dict[str, list[int]]]:
    """How many steps took each fault family in each bin (bin starts, family -> counts)."""
    if not rows or width_s <= 0:
        return [], {}
    nbins = int(rows[-1].time_s // width_s) + 1
    mix: dict[str, list[int]] = {}
    for r in rows:
        mix.setdefault(fault_family(r.action), [0] * nbins)[int(r.time_s // width_s)] += 1
    return [i * width_s for i in range(nbins)], dict(sorted(mix.items()))


def feedback_series(rows: Sequence[PlotRow]) -> tuple[list[float], list[float]]:
    """Feedback latency (ms) of every step whose feedback came in time."""
    pairs = [(r.time_s, r.feedback_ms) for r in rows if r.feedback_ms is not None]
    return [t for t, _ in pairs], [f for _, f in pairs]


def late_series(rows: Sequence[PlotRow]) -> tuple[list[float], list[int]]:
    """Cumulative late steps (feedback that missed its deadline)."""
    return [r.time_s for r in rows], [r.late_steps for r in rows]


def value_at(rows: Sequence[PlotRow], t: float, metric: Metric) -> int:
    """The count reached by time t (a step function of the rows)."""
    value = 0
    for r in rows:
        if r.time_s > t:
            break
        value = metric.of(r) or 0
    return value


def common_horizon(runs: Iterable[Sequence[PlotRow]]) -> float | None:
    """The shortest campaign's duration (None if no campaign recorded a step): campaigns are
    compared over the same time, whatever each does per second."""
    return min((rows[-1].time_s for rows in runs if rows), default=None)


@dataclass(frozen=True)
class GroupCurve:
    """One group's count over a common time grid: mean and spread over its campaigns (seeds)."""

    group: str
    runs: int
    grid: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    final: list[int]  # each run's count at the common horizon

    @property
    def final_spread(self) -> Spread:
        return spread(self.final)


def overlay(groups: Mapping[str, Sequence[Sequence[PlotRow]]], metric: Metric, horizon_s: float,
            points: int = 200) -> list[GroupCurve]:
    """Each group's curve of `metric` on a grid from 0 to `horizon_s`, over those of its
    campaigns that recorded the metric (a group with none has no curve)."""
    grid = [horizon_s * i / (points - 1) for i in range(points)] if points > 1 else [horizon_s]
    curves = []
    for group, runs in groups.items():
        runs = [rows for rows in runs if metric.recorded(rows)]
        if not runs:
            continue
        sampled = [[value_at(rows, t, metric) for t in grid] for rows in runs]
        columns = list(zip(*sampled))
        curves.append(
            GroupCurve(
                group=group,
                runs=len(runs),
                grid=grid,
                mean=[sum(c) / len(c) for c in columns],
                low=[min(c) for c in columns],
                high=[max(c) for c in columns],
                final=[s[-1] for s in sampled],
            )
        )
    return curves
