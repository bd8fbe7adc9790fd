"""ModelFuzz's corpus and mutations (learner/corpus.py): mutations keep schedules
well-formed, entries are picked in proportion to their energy, and the corpus round-trips."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.learner import checkpoint as ckpt
from mallory.learner.corpus import (
    MUTATIONS,
    WINDOW_RANGE,
    Corpus,
    Plan,
    PlannedStep,
    drop,
    duplicate,
    mutate,
    random_plan,
    redraw,
    replace,
    respec,
    swap,
    well_formed,
    window,
)

ACTIONS = ("partition:one", "partition:majority", "kill:one", "kill:all", "pause:one", "heal", "noop")
WINDOW_S = 2.5


@st.composite
def campaigns(draw):
    """A campaign's actions (a non-empty subset of ACTIONS), steps per schedule, and a plan
    it can play."""
    actions = draw(st.lists(st.sampled_from(ACTIONS), min_size=1, unique=True))
    max_steps = draw(st.integers(1, 12))
    steps = draw(st.lists(st.builds(
        PlannedStep, st.sampled_from(actions), st.integers(0, 2**40),
        st.one_of(st.none(), st.sampled_from([WINDOW_S / 4, WINDOW_S / 2, WINDOW_S * 2, WINDOW_S * 4]))),
        min_size=1, max_size=max_steps))
    return actions, max_steps, Plan(draw(st.integers(0, 2**62)), tuple(steps))


@settings(max_examples=300, deadline=None)
@given(campaigns(), st.integers(0, 2**32), st.integers(1, 8))
def test_mutations_keep_a_schedule_well_formed_and_its_seed(campaign, seed, count):
    actions, max_steps, plan = campaign
    assert well_formed(plan, actions, max_steps, WINDOW_S)
    mutated = mutate(random.Random(seed), plan, 4, actions, max_steps, WINDOW_S, count)
    assert well_formed(mutated, actions, max_steps, WINDOW_S)
    assert mutated.seed == plan.seed and mutated.parent == 4
    assert len(mutated.mutations) == count, "a window change always applies, so every round mutates"
    assert set(mutated.mutations) <= set(MUTATIONS)


@settings(max_examples=200, deadline=None)
@given(campaigns(), st.integers(0, 2**32), st.sampled_from(sorted(MUTATIONS)))
def test_each_mutation_applies_or_says_it_cannot(campaign, seed, name):
    actions, max_steps, plan = campaign
    changed = MUTATIONS[name](random.Random(seed), plan.steps, actions, max_steps, WINDOW_S)
    if changed is not None:
        assert well_formed(plan._replace(steps=changed), actions, max_steps, WINDOW_S)


def test_what_each_mutation_does():
    rng = random.Random(1)
    steps = (PlannedStep("partition:one", 0), PlannedStep("heal", 1), PlannedStep("kill:one", 2, 5.0))
    swapped = swap(rng, steps, ACTIONS, 12, WINDOW_S)
    assert swapped != steps and sorted(swapped) == sorted(steps), "the same steps, targets' draws with them"
    respecced = respec(rng, steps, ACTIONS, 12, WINDOW_S)
    changed = [(a, b) for a, b in zip(steps, respecced) if a != b]
    assert len(changed) == 1 and changed[0][0].draw == changed[0][1].draw
    assert changed[0][1].action in {"partition:majority", "kill:all"}, "another action of the same family"
    for seed in range(40):
        replaced = replace(random.Random(seed), steps, ACTIONS, 12, WINDOW_S)
        changed = [(a, b) for a, b in zip(steps, replaced) if a != b]
        assert len(changed) == 1 and changed[0][0].action != changed[0][1].action, "another action"
        assert changed[0][0].draw == changed[0][1].draw and changed[0][1].action in ACTIONS
    redrawn = redraw(rng, steps, ACTIONS, 12, WINDOW_S)
    changed = [(a, b) for a, b in zip(steps, redrawn) if a != b]
    assert len(changed) == 1 and changed[0][0].action == changed[0][1].action != "heal"
    windowed = window(random.Random(3), steps, ACTIONS, 12, WINDOW_S)
    assert [s.window_s for s in windowed] != [s.window_s for s in steps]
    assert {s.window_s for s in windowed} <= {None, 5.0, 10.0, 1.25}
    assert len(drop(rng, steps, ACTIONS, 12, WINDOW_S)) == 2
    doubled = duplicate(rng, steps, ACTIONS, 12, WINDOW_S)
    assert len(doubled) == 4 and any(a == b for a, b in pairwise(doubled))


def test_a_mutation_that_cannot_apply_says_so():
    one = (PlannedStep("heal", 0),)
    assert swap(random.Random(1), one, ACTIONS, 1, WINDOW_S) is None
    assert drop(random.Random(1), one, ACTIONS, 1, WINDOW_S) is None
    assert duplicate(random.Random(1), one, ACTIONS, 1, WINDOW_S) is None
    assert redraw(random.Random(1), one, ACTIONS, 1, WINDOW_S) is None, "heal has no targets"
    assert respec(random.Random(1), (PlannedStep("pause:one", 0),), ACTIONS, 1, WINDOW_S) is None


def test_windows_stay_within_their_range_however_often_they_change():
    steps = (PlannedStep("kill:one", 0),)
    rng = random.Random(5)
    for _ in range(200):
        steps = window(rng, steps, ACTIONS, 1, WINDOW_S)
        now = steps[0].window_s or WINDOW_S
        assert WINDOW_S / WINDOW_RANGE <= now <= WINDOW_S * WINDOW_RANGE


def test_a_random_plan_draws_as_the_loop_does():
    plan = random_plan(random.Random(2), ["kill:one", "heal"], 5, seed=77)
    assert plan.seed == 77 and [s.draw for s in plan.steps] == [0, 1, 2, 3, 4]
    assert all(s.window_s is None for s in plan.steps) and plan.parent is None


def test_entries_are_picked_in_proportion_to_their_energy():
    corpus = Corpus()
    plan = Plan(1, (PlannedStep("kill:one", 0),))
    corpus.add(plan, 1)
    corpus.add(plan._replace(seed=2), 3)
    corpus.add(plan._replace(seed=3, steps=(PlannedStep("stop:one", 0),)), 50)  # a label this campaign lacks
    rng = random.Random(7)

    def fits(plan: Plan) -> bool:
        return well_formed(plan, ACTIONS, 12, WINDOW_S)

    picks = Counter(corpus.pick(rng, fits) for _ in range(8000))
    assert set(picks) == {0, 1}, "an entry the campaign cannot play is never picked"
    assert 2.7 < picks[1] / picks[0] < 3.3
    assert Corpus().pick(rng, fits) is None


def test_an_entry_must_have_reached_a_new_state():
    with pytest.raises(ValueError):
        Corpus().add(Plan(1, (PlannedStep("heal", 0),)), 0)


def test_the_corpus_round_trips_and_refuses_a_corrupt_entry():
    corpus = Corpus()
    first = corpus.add(Plan(9, (PlannedStep("kill:one", 0), PlannedStep("heal", 1, 1.25))), 2)
    corpus.add(Plan(9, (PlannedStep("kill:all", 0),), first, ("respec", "drop")), 1)
    state = ckpt.loads(ckpt.dumps({"corpus": corpus.to_state()}))["corpus"]
    assert Corpus.from_state(state) == corpus
    for broken in ({"new_model_states": 0}, {"parent": 1}, {"steps": []}, {"steps": [{"action": "x", "draw": -1,
                                                                                        "window_s": None}]}):
        rows = corpus.to_state()
        rows[1].update(broken)
        with pytest.raises(ckpt.CheckpointError, match=r"corpus\[1\]"):
            Corpus.from_state(rows)
