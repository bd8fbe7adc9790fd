"""The schedule reductions against deterministic fake oracles: drop, shorten, weaken."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.campaign.loop import ScriptedStep
from mallory.shrink.phases import (
    WEAKER,
    shorter_windows,
    shrink_schedule,
    weaker_actions,
)

PADDING = ["duplicate:pair", "delay:one", "noop", "clock:bump", "pause:one"]


def step(action: str, draw: int, window: float = 2.0) -> ScriptedStep:
    return ScriptedStep(action, draw, window)


def fake_sticky_leader(candidate: list[ScriptedStep]) -> bool:
    """A fake oracle shaped like the example SUT's sticky-leader bug: a partition (of any
    strength) drawn by step 3, then a kill drawn by step 6 lasting >= 1 s, then a heal."""
    actions = [(s.action.partition(":")[0], s.draw, s) for s in candidate]
    try:
        p = next(i for i, (f, d, _) in enumerate(actions) if f == "partition" and d == 3)
        k = next(i for i, (f, d, s) in enumerate(actions) if f == "kill" and d == 6 and s.window_s >= 1.0)
        h = next(i for i, (f, _, _) in enumerate(actions) if f == "heal")
    except StopIteration:
        return False
    return p < k < h


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(PADDING), min_size=0, max_size=8), st.randoms(use_true_random=False))
def test_padding_is_dropped_windows_shortened_and_faults_weakened(padding, rnd):
    essential = [step("partition:majority", 3), step("kill:all", 6), step("heal", 9)]
    schedule = list(essential)
    for action in padding:  # padding anywhere, essential order kept
        schedule.insert(rnd.randint(0, len(schedule)), step(action, 100 + len(schedule)))
    asked = []

    def fails(candidate):
        asked.append(candidate)
        return fake_sticky_leader(candidate)

    result = shrink_schedule(schedule, fails, floor_s=0.25)
    assert [s.action for s in result] == ["partition:one", "kill:one", "heal"]
    assert [s.draw for s in result] == [3, 6, 9]
    assert [s.window_s for s in result] == [0.25, 1.0, 0.25]  # the kill needs 1 s: 2.0 -> 1.0, not 0.5
    assert fails(result)


def test_weakening_only_offers_enabled_faults():
    schedule = [step("partition:majority", 3), step("kill:all", 6), step("heal", 9)]
    result = shrink_schedule(schedule, fake_sticky_leader, floor_s=2.0, allowed=lambda a: a != "kill:one")
    assert [s.action for s in result] == ["partition:one", "kill:minority", "heal"]


def test_weaker_actions_are_the_same_family_and_weakest_first():
    assert weaker_actions("kill:all") == ("kill:one", "kill:minority", "kill:majority")
    assert weaker_actions("drop:all") == ("drop:pair", "drop:one")
    assert weaker_actions("kill:one") == ()
    assert weaker_actions("clock:strobe") == ()
    assert weaker_actions("heal") == ()
    for family, ladder in WEAKER.items():
        for spec, weaker in ladder.items():
            assert spec not in weaker


def test_shorter_windows_start_at_the_floor_then_halve():
    assert shorter_windows(2.0, 0.25) == [0.25, 1.0, 0.5]
    assert shorter_windows(0.25, 0.25) == []
    assert all(0.25 <= w < 2.5 for w in shorter_windows(2.5, 0.25))
