import random

import pytest

from mallory.errors import MalloryError
from mallory.learner.calibration import calibrate_threshold, coincidence_fraction
from mallory.learner.states import StateStore
from tests.unit.learner.summaries import random_summary, steady_windows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_calibrated_threshold_makes_ninety_percent_coincide(seed):
    windows = steady_windows(random.Random(seed), 300)
    epsilon = calibrate_threshold(windows, coincide=0.9)
    assert 0.5 < epsilon < 1.0
    assert (epsilon * 128).is_integer()
    # replay through the very store a campaign would build, by hand
    store = StateStore(threshold=epsilon)
    coinciding = sum(not store.lookup(window).is_new for window in windows)
    assert coinciding / (len(windows) - 1) >= 0.9
    assert coincidence_fraction(windows, epsilon) == coinciding / (len(windows) - 1)
    # and it discriminates: the steady run collapses to a handful of states, not to one
    assert 1 < len(store) <= 0.1 * len(windows)


def test_calibrated_threshold_is_the_most_discriminating_that_passes():
    windows = steady_windows(random.Random(3), 300)
    strict = calibrate_threshold(windows, coincide=0.9)
    lax = calibrate_threshold(windows, coincide=0.5)
    assert lax >= strict
    # one step stricter than the answer misses the target (checked on this sample)
    assert coincidence_fraction(windows, strict + 1 / 128) < 0.9
    assert coincidence_fraction(windows, strict) >= 0.9


def test_identical_windows_calibrate_to_exact_match():
    window = random_summary(random.Random(1), 60)
    assert calibrate_threshold([window] * 20) == 1.0


def test_unrelated_windows_cannot_be_calibrated():
    rng = random.Random(2)
    with pytest.raises(MalloryError, match="too dissimilar"):
        calibrate_threshold([random_summary(rng, 60) for _ in range(50)])


@pytest.mark.parametrize("coincide", [0, 1.5, "0.9", True])
def test_bad_coincide_is_a_user_error(coincide):
    with pytest.raises(MalloryError, match="coincide"):
        calibrate_threshold(steady_windows(random.Random(1), 10), coincide=coincide)


def test_too_few_windows_is_a_user_error():
    with pytest.raises(MalloryError, match="at least 2"):
        calibrate_threshold([frozenset({"a"})])


def test_too_many_windows_is_a_user_error():
    with pytest.raises(MalloryError, match="more than the 50"):
        calibrate_threshold(steady_windows(random.Random(1), 51), max_windows=50)
