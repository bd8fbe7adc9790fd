"""The replay verdicts: a fraction of replays, early stops, and the journal that lets an
interrupted shrink continue without asking any replay twice. The replays are fakes."""

from __future__ import annotations

import pytest

from mallory.campaign.loop import ScriptedStep
from mallory.errors import MalloryError
from mallory.shrink.fraction import FractionOracle
from mallory.shrink.journal import Journal
from mallory.shrink.phases import shrink_schedule

A = [ScriptedStep("partition:one", 0, 1.0), ScriptedStep("kill:one", 1, 1.0)]
B = [ScriptedStep("kill:one", 1, 1.0)]


class FakeReplays:
    """A fake live replay: answers from a fixed sequence of hits per candidate."""

    def __init__(self, hits: dict[tuple, list[bool]]) -> None:
        self.hits = {k: list(v) for k, v in hits.items()}
        self.calls: list[tuple] = []

    def __call__(self, candidate):
        key = tuple(s.action for s in candidate)
        self.calls.append(key)
        return self.hits[key].pop(0), f"/fake/{len(self.calls)}"


def test_fraction_needed_and_early_stops(tmp_path):
    fake = FakeReplays({("partition:one", "kill:one"): [True, False, True, True], ("kill:one",): [False, False, False, True]})
    oracle = FractionOracle(fake, Journal(tmp_path / "j.jsonl"), replays=4, min_fraction=0.5)
    assert oracle.needed == 2
    a = oracle.verdict(A)
    assert (a.fails, a.hits, a.replays) == (True, 2, 3)  # stopped once 2 hits were in
    b = oracle.verdict(B)
    assert (b.fails, b.hits, b.replays) == (False, 0, 3)  # stopped when 2 of 4 became out of reach
    assert len(fake.calls) == 6


def test_journal_survives_an_interruption_and_nothing_is_asked_twice(tmp_path):
    path = tmp_path / "work" / "journal.jsonl"
    interrupted = FakeReplays({("partition:one", "kill:one"): [True]})

    def cut_short(candidate):
        if interrupted.calls:
            raise KeyboardInterrupt  # Ctrl-C during the second replay
        return interrupted(candidate)

    with pytest.raises(KeyboardInterrupt):
        FractionOracle(cut_short, Journal(path), replays=3, min_fraction=1.0).verdict(A)
    with open(path, "ab") as f:
        f.write(b'{"candidate": [["kill:one", 1')  # a line the killed process was writing

    resumed = FakeReplays({("partition:one", "kill:one"): [True, True]})
    verdict = FractionOracle(resumed, Journal(path), replays=3, min_fraction=1.0).verdict(A)
    assert (verdict.fails, verdict.hits, verdict.replays, verdict.journaled) == (True, 3, 3, 1)
    assert len(resumed.calls) == 2  # the journaled replay was not asked again


def test_a_whole_shrink_is_answered_from_its_journal(tmp_path):
    path = tmp_path / "journal.jsonl"
    schedule = [ScriptedStep("noop", 0, 1.0), ScriptedStep("partition:one", 1, 1.0), ScriptedStep("kill:one", 2, 1.0)]

    def fake_replay(candidate):
        actions = [s.action for s in candidate]
        return "partition:one" in actions and "kill:one" in actions, None

    first = shrink_schedule(schedule, FractionOracle(fake_replay, Journal(path), 2, 1.0), floor_s=1.0)

    def must_not_replay(candidate):
        raise AssertionError(f"asked again: {candidate}")

    again = shrink_schedule(schedule, FractionOracle(must_not_replay, Journal(path), 2, 1.0), floor_s=1.0)
    assert again == first == schedule[1:]


def test_a_corrupt_journal_line_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'not json\n{"candidate": [], "hit": true, "dir": null}\n')
    with pytest.raises(MalloryError, match=r"journal.jsonl:1"):
        Journal(path)
