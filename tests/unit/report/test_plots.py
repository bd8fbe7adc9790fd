"""The plots draw the series they are given (read back from the PNG's series chunk)."""

from __future__ import annotations

from mallory.report.plots import fault_mix_plot, loss_plot, read_series
from mallory.report.recording import LossPoint
from tests.unit.report.report_checks import assert_png


def test_loss_is_cumulative_per_node_on_campaign_time():
    origin = 1_000_000_000_000
    points = [LossPoint(origin + 3_000_000_000, "n2", 5), LossPoint(origin + 1_000_000_000, "n1", 2),
              LossPoint(origin + 2_000_000_000, "n1", 7)]
    png = loss_plot(points, origin)
    assert_png(png)
    series = {s["label"]: (s["x"], s["y"]) for s in read_series(png)}
    assert series == {"n1": ([1.0, 2.0], [2.0, 9.0]), "n2": ([3.0], [5.0])}


def test_no_recording_and_no_loss_still_give_a_picture():
    assert read_series(loss_plot(None, None)) == []
    assert read_series(loss_plot([], 0)) == []
    assert_png(loss_plot(None, None))


def test_fault_mix_bars_are_stacked_counts():
    png = fault_mix_plot([0.0, 10.0], {"kill": [1, 0], "partition": [2, 3]}, 10.0)
    bars = {s["label"]: (s["x"], s["y"]) for s in read_series(png)}
    assert bars == {"kill": ([0.0, 10.0], [1.0, 0.0]), "partition": ([0.0, 10.0], [2.0, 3.0])}
