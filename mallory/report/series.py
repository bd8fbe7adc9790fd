"""Time series for the report's plots, computed from `plot_data` rows (pure).

x is campaign time in seconds (plot_data's relative_time_s, which continues across resumes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mallory.report.campaign_data import PlotRow
from mallory.report.stats import Spread, spread, vargha_delaney_a12


def states_over_time(rows: Sequence[PlotRow]) -> tuple[list[float], list[int]]:
    """Distinct states after every step, starting from (0, 0)."""
    return [0.0, *(r.time_s for r in rows)], [0, *(r.distinct_states for r in rows)]


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


def states_at(rows: Sequence[PlotRow], t: float) -> int:
    """Distinct states reached by time t (a step function of the rows)."""
    value = 0
    for r in rows:
        if r.time_s > t:
            break
        value = r.distinct_states
    return value


@dataclass(frozen=True)
class GroupCurve:
    """One policy's distinct states over a common time grid: mean and spread over seeds."""

    policy: str
    runs: int
    grid: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    final: list[int]  # each run's distinct states at the common horizon

    @property
    def final_spread(self) -> Spread:
        return spread(self.final)


def overlay(groups: dict[str, list[Sequence[PlotRow]]], points: int = 200) -> tuple[float, list[GroupCurve]]:
    """Curves of several campaigns grouped by policy, on a grid up to the common horizon: the
    shortest campaign's duration, so that every run is compared over the same time."""
    runs = [rows for group in groups.values() for rows in group if rows]
    if not runs:
        return 0.0, []
    horizon = min(rows[-1].time_s for rows in runs)
    grid = [horizon * i / (points - 1) for i in range(points)] if points > 1 else [horizon]
    curves = []
    for policy, group in groups.items():
        group = [rows for rows in group if rows]
        if not group:
            continue
        sampled = [[states_at(rows, t) for t in grid] for rows in group]
        columns = list(zip(*sampled))
        curves.append(
            GroupCurve(
                policy=policy,
                runs=len(group),
                grid=grid,
                mean=[sum(c) / len(c) for c in columns],
                low=[min(c) for c in columns],
                high=[max(c) for c in columns],
                final=[s[-1] for s in sampled],
            )
        )
    return horizon, curves


def pairwise_a12(curves: Sequence[GroupCurve]) -> list[tuple[str, str, float]]:
    """Â12 of final distinct states for every ordered pair of policies (each pair once)."""
    out = []
    for i, a in enumerate(curves):
        for b in curves[i + 1 :]:
            out.append((a.policy, b.policy, vargha_delaney_a12(a.final, b.final)))
    return out
