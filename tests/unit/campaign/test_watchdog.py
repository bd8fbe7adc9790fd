"""The loop and its watchdog (the fakes of test_loop.py): a restarted component makes a gap
in what was observed, which teaches the learner nothing and gets no finding blamed on it;
a component that ends the campaign drops the schedule in flight whole."""

from __future__ import annotations

import pytest

from mallory.campaign.loop import BugEvidence, ComponentDied
from mallory.errors import MalloryError
from tests.unit.campaign.test_loop import FakeTimeline, make_campaign


class ScriptedWatchdog:
    """Reports a restarted observer at the given calls (1-based) and, from `fatal_from` on,
    a dead mediator."""

    def __init__(self, revive_at: set[int] = frozenset(), fatal_from: int | None = None) -> None:
        self.revive_at = revive_at
        self.fatal_from = fatal_from
        self.calls = 0
        self.graces: list[float] = []

    def revive_dead(self, grace_s: float = 0.0) -> list[str]:
        self.calls += 1
        self.graces.append(grace_s)
        if self.fatal_from is not None and self.calls >= self.fatal_from:
            raise ComponentDied("the mediator (pid 4242) was killed by SIGKILL; its log: gw/mediator.log")
        return ["observer n2"] if self.calls in self.revive_at else []


class AlwaysFinds:
    def begin_schedule(self, index):
        pass

    def faults_healed(self):
        pass

    def check_schedule(self, index, record):
        return [BugEvidence("log:two-leaders", {"explanation": "two leaders"})]


# One schedule of 12 steps asks the watchdog 14 times: at the start (1), after each step's
# window (2..13) and after the reset (14).
STEPS = 12
CALLS_PER_SCHEDULE = STEPS + 2


def test_a_step_with_a_restarted_observer_is_unobserved_and_teaches_nothing(tmp_path):
    campaign, _ = make_campaign(tmp_path, "qlearning")
    campaign.watchdog = ScriptedWatchdog(revive_at={5})  # after step 3's window
    campaign.run(schedules=1)
    (record,) = campaign.dir.read_schedules()
    gap = record["steps"][3]
    assert gap["unobserved"] == ["observer n2"] and not gap["late"]
    assert gap["state"] is None and gap["reward"] is None
    assert all("unobserved" not in s and s["state"] is not None for i, s in enumerate(record["steps"]) if i != 3)
    assert record["unobserved"] == [{"at": 3, "restarted": ["observer n2"]}]
    assert campaign.dir.read_stats()["late_steps"] == "0"  # a gap is not lateness
    known = {record["initial_state"]} | {s["state"] for s in record["steps"] if s["state"] is not None}
    assert len(campaign.learner.learner.store) == len(known)  # the gap's window added no state


@pytest.mark.parametrize("call, at", [(1, "start"), (7, 5), (CALLS_PER_SCHEDULE, "reset")])
def test_findings_of_a_schedule_with_a_gap_are_not_bugs(tmp_path, call, at):
    campaign, _ = make_campaign(tmp_path, "random", checker=AlwaysFinds())
    campaign.watchdog = ScriptedWatchdog(revive_at={call})
    campaign.run(schedules=2)
    gapped, whole = campaign.dir.read_schedules()
    assert gapped["unobserved"] == [{"at": at, "restarted": ["observer n2"]}]
    assert gapped["findings"] == [] and gapped["unobserved_findings"] == ["log:two-leaders"]
    if at == "start":
        assert gapped["initial_state"] is None  # not judged from a window with a gap
    assert whole["findings"] == ["log:two-leaders"] and "unobserved" not in whole
    sightings = (campaign.dir.root / "bugs" / "log_two-leaders" / "sightings.jsonl").read_text().splitlines()
    assert len(sightings) == 1 and '"schedule":1' in sightings[0]


@pytest.mark.parametrize("fatal_from", [CALLS_PER_SCHEDULE + 4, 2 * CALLS_PER_SCHEDULE])  # mid-steps, at the reset
def test_a_dead_mediator_drops_the_schedule_in_flight_whole(tmp_path, fatal_from):
    campaign, nemesis = make_campaign(tmp_path, "qlearning", checker=AlwaysFinds())
    campaign.watchdog = ScriptedWatchdog(fatal_from=fatal_from)
    with pytest.raises(ComponentDied, match="the mediator .* was killed by SIGKILL") as died:
        campaign.run(schedules=3)
    assert died.value.exit_code == 69
    assert [r["index"] for r in campaign.dir.read_schedules()] == [0]
    saved = campaign.dir.load_learner()
    assert saved is not None and campaign.dir.read_stats()["schedules_done"] == "1"
    assert len((campaign.dir.root / "bugs" / "log_two-leaders" / "sightings.jsonl").read_text().splitlines()) == 1
    # a resumed campaign redoes the dropped schedule from the last checkpoint
    again, _ = make_campaign(tmp_path, "qlearning", checker=AlwaysFinds(), create=False)
    assert again.progress.schedules_done == 1 and again.learner.learner.to_checkpoint() == saved
    again.run(schedules=1)
    assert [r["index"] for r in again.dir.read_schedules()] == [0, 1]


class DyingTimeline(FakeTimeline):
    """The mediator's timeline, unreachable from its `dies_at`th window on."""

    dies_at = 3  # step 1's window (the first is the orientation)

    def window(self, start_ns, end_ns, wait_s):
        if self.calls + 1 >= self.dies_at:
            raise MalloryError("mediator at http://10.100.0.2:7000 unreachable (POST /window): connection refused")
        return super().window(start_ns, end_ns, wait_s)


@pytest.mark.parametrize("dies_at, fatal_from", [
    (1, 2),  # the schedule's orientation window; the watchdog's call after it finds the mediator dead
    (3, 4),  # step 1's window
])  # fmt: skip
def test_a_window_that_failed_because_the_mediator_died_ends_as_its_death(tmp_path, dies_at, fatal_from):
    campaign, nemesis = make_campaign(tmp_path, "random")
    campaign.source = DyingTimeline(campaign.source.clock, nemesis)
    campaign.source.dies_at = dies_at
    campaign.watchdog = ScriptedWatchdog(fatal_from=fatal_from)
    with pytest.raises(ComponentDied, match="the mediator") as died:
        campaign.run(schedules=1)
    assert "unreachable" in str(died.value.__context__)
    assert campaign.dir.read_schedules() == [] and nemesis.resets == 0
    # only the call after the failure waits for a component that may be dying
    graces = campaign.watchdog.graces
    assert graces[:-1] == [0.0] * (fatal_from - 1) and graces[-1] > 0


class DyingNemesis:
    """Wraps the fake nemesis: its reset reaches the firewall through a dead mediator."""

    def __init__(self, nemesis) -> None:
        self.nemesis = nemesis

    def __getattr__(self, name):
        return getattr(self.nemesis, name)

    def reset(self):
        raise MalloryError("mediator at http://10.100.0.2:7000 unreachable (POST /firewall/heal): connection refused")


def test_a_reset_that_failed_because_the_mediator_died_ends_as_its_death(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "random")
    campaign.nemesis = DyingNemesis(nemesis)
    campaign.watchdog = ScriptedWatchdog(fatal_from=CALLS_PER_SCHEDULE)  # the call after the failed reset
    with pytest.raises(ComponentDied, match="the mediator"):
        campaign.run(schedules=1)
    assert campaign.dir.read_schedules() == []
