"""plot_data parsing and the plotted series, on hand-written rows."""

from __future__ import annotations

import pytest

from mallory.errors import MalloryError
from mallory.report.campaign_data import parse_plot_data
from mallory.report.comparison import contrasts
from mallory.report.series import (
    STATES,
    common_horizon,
    fault_mix,
    over_time,
    overlay,
    states_per_hour,
    value_at,
)

HEADER = "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, new_state, feedback_ms\n"


def rows(*lines: str):
    return parse_plot_data(HEADER + "".join(line + "\n" for line in lines))


def test_parse_plot_data_fields():
    (r1, r2) = rows("2.5, 0, 1, 2, 0, 0, kill:one, 1, 1, 97.0", "5.0, 0, 2, 2, 0, 1, heal, , 0, ")
    assert (r1.time_s, r1.steps_done, r1.distinct_states, r1.action, r1.state, r1.new_state, r1.feedback_ms) == (
        2.5, 1, 2, "kill:one", 1, True, 97.0)
    assert (r2.state, r2.new_state, r2.feedback_ms, r2.late_steps) == (None, False, None, 1)


def test_torn_last_line_is_dropped_but_a_bad_middle_line_is_an_error():
    text = HEADER + "2.5, 0, 1, 2, 0, 0, kill:one, 1, 1, 97.0\n3.0, 0, 2"
    assert len(parse_plot_data(text)) == 1
    with pytest.raises(MalloryError, match=r"plot_data:2: malformed"):
        parse_plot_data(HEADER + "2.5, 0, 1, x, 0, 0, kill:one, 1, 1, 97.0\n3.0, 0, 2, 2, 0, 0, noop, 1, 0, 9\n")


def test_states_per_hour_counts_growth_per_bin():
    r = rows("10, 0, 1, 2, 0, 0, a, 1, 1, 1", "50, 0, 2, 3, 0, 0, a, 2, 1, 1", "70, 0, 3, 3, 0, 0, a, 2, 0, 1",
             "130, 0, 4, 6, 0, 0, a, 3, 1, 1")
    starts, rates = states_per_hour(r, 60.0)
    # bins [0,60): 0->3 = 3 states; [60,120): 0; [120,180): 3 -> 6 = 3; per hour: x60
    assert starts == [0.0, 60.0, 120.0]
    assert rates == [180.0, 0.0, 180.0]


def test_fault_mix_by_family_and_bin():
    r = rows("1, 0, 1, 1, 0, 0, partition:one, 1, 1, 1", "2, 0, 2, 1, 0, 0, partition:majority, 1, 0, 1",
             "11, 0, 3, 1, 0, 0, kill:one, 1, 0, 1", "12, 0, 4, 1, 0, 0, heal, 1, 0, 1")
    starts, mix = fault_mix(r, 10.0)
    assert starts == [0.0, 10.0]
    assert mix == {"heal": [0, 1], "kill": [0, 1], "partition": [2, 0]}


def test_overlay_mean_spread_and_a12_at_the_common_horizon():
    q1 = rows("10, 0, 1, 4, 0, 0, a, 1, 1, 1", "20, 0, 2, 8, 0, 0, a, 1, 1, 1")
    q2 = rows("10, 0, 1, 2, 0, 0, a, 1, 1, 1", "30, 0, 2, 10, 0, 0, a, 1, 1, 1")  # 10 states only after 20 s
    r1 = rows("10, 0, 1, 1, 0, 0, a, 1, 1, 1", "20, 0, 2, 3, 0, 0, a, 1, 1, 1")
    horizon = common_horizon([q1, q2, r1])
    assert horizon == 20.0
    curves = overlay({"qlearning": [q1, q2], "random": [r1]}, STATES, horizon, points=3)
    q, r = curves
    assert q.grid == [0.0, 10.0, 20.0]
    assert q.final == [8, 2] and r.final == [3]
    assert q.mean == [0.0, 3.0, 5.0] and q.low == [0, 2, 2] and q.high == [0, 4, 8]
    # 8 > 3, 2 < 3 -> 1 / 2
    assert [(c.a, c.b, c.a12) for c in contrasts(curves)] == [("qlearning", "random", 0.5)]
    assert value_at(q2, 29.9, STATES) == 2 and over_time(q1, STATES) == ([0.0, 10.0, 20.0], [0, 4, 8])
