"""A campaign's protocol model: loading a user's file, binding its event names to the SUT's
event types, fault targets from the loop's reports, and the loop feeding windows through
it (fuzzer_stats, plot_data, schedule records, resume)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mallory.campaign.config import CampaignConfig, LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import Campaign
from mallory.campaign.model import bind_model, load_model
from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.learner.learner import Learner
from mallory.learner.model import Step
from mallory.mediator.windows import Window
from mallory.observer.log_events import log_event_id
from mallory.report.campaign_data import load_campaign
from mallory.report.pages import model_rows, summary_rows
from tests.unit.campaign.test_loop import FakeClock, FakeNemesis, FakeTimeline

NODES = ("n1", "n2", "n3")
CATALOGUE = Catalogue([CodeEvent(0xA1, "lock.c", 10, "grab", "FUNC", "lock-acquired")])
ACQUIRED = "FUNC:a1"
RELEASED = f"LOG:{log_event_id('lock-released'):x}"

#: a lock: free or held by one node; a crash of the holder frees it
LOCK_MODEL = '''
NAME = "lock"

def initial(nodes):
    return "free"

def acquire(holder, step):
    return step.node if holder == "free" else None

def release(holder, step):
    return "free" if holder == step.node else None

def crash(holder, step):
    return "free" if holder in step.targets else holder

ACTIONS = {"acquire": acquire, "release": release, "crash": crash}

def abstract(holder):
    return holder

EVENTS = {"lock-acquired": "acquire", "lock-released": "release", "fault:kill": "crash"}
'''


@pytest.fixture
def lock_file(tmp_path):
    path = tmp_path / "lock_model.py"
    path.write_text(LOCK_MODEL)
    return path


def test_a_model_file_loads_and_its_names_bind_to_code_log_and_fault_events(lock_file):
    feed = bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"])
    assert feed.names[ACQUIRED] == "lock-acquired" and feed.names[RELEASED] == "lock-released"
    assert {"FAULT:kill:one", "FAULT:kill:all"} <= feed.trace_types
    assert not any(kind.startswith("FAULT:pause") for kind in feed.trace_types)


def test_an_action_name_binds_its_own_fault_event_and_wins_over_its_family(tmp_path):
    path = tmp_path / "m.py"
    # the action's name listed first: binding must not let the family's name overwrite it
    path.write_text(LOCK_MODEL + '\nEVENTS = {"fault:membership:remove": "crash", "fault:membership": "acquire"}\n')
    feed = bind_model(load_model(path), NODES, CATALOGUE, [])
    assert feed.names["FAULT:membership:remove"] == "fault:membership:remove"
    assert feed.names["FAULT:membership:promote"] == "fault:membership"
    feed.noted("membership:remove", {"nodes": ["n3"], "links": []})
    assert feed.steps([("mediator", "FAULT:membership:remove")]) == [
        Step("fault:membership:remove", "mediator", ("n3",), ())]


def test_a_fault_step_gets_the_targets_and_links_of_its_report(lock_file):
    feed = bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"])
    feed.noted("kill:one", {"nodes": ["n2"], "links": ["n2->n1"]})
    steps = feed.steps([("n2", ACQUIRED), ("mediator", "FAULT:kill:one"), ("mediator", "FAULT:kill:one"),
                        ("n1", "SEND:abcd")])
    assert steps == [Step("lock-acquired", "n2"), Step("fault:kill", "mediator", ("n2",), (("n2", "n1"),)),
                     Step("fault:kill", "mediator")]  # a FAULT nobody noted (the report was used): no targets


@pytest.mark.parametrize("events, problem", [
    ({"lock-grabbed": "acquire"}, "no event named 'lock-grabbed'"),
    ({"fault:explode": "crash"}, "no fault family or action 'explode'"),
    ({"fault:membership:explode": "crash"}, "no fault family or action 'membership:explode'"),
    ({"client:write": "acquire"}, "is not client:<f>:<invoke|ok|fail|info>"),
])
def test_a_name_the_sut_does_not_have_is_refused_before_the_campaign(tmp_path, events, problem):
    path = tmp_path / "m.py"
    path.write_text(LOCK_MODEL + f"\nEVENTS = {events!r}\n")
    with pytest.raises(MalloryError, match=problem):
        bind_model(load_model(path), NODES, CATALOGUE, ["lock-released"])


def test_a_client_op_binds_to_its_timeline_type(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(LOCK_MODEL + '\nEVENTS = {"client:write:ok": "acquire", "client:read:invoke": "release"}\n')
    feed = bind_model(load_model(path), NODES, CATALOGUE, [])
    assert feed.trace_types == {"CLIENT_COMPLETE:write:ok", "CLIENT_INVOKE:read:invoke"}


def test_a_model_file_that_fails_to_import_is_refused_naming_it(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("NAME = 'x'\n1 / 0\n")
    with pytest.raises(MalloryError, match=r"broken.py: importing it failed: ZeroDivisionError"):
        load_model(path)
    with pytest.raises(MalloryError, match="no such file"):
        load_model(tmp_path / "absent.py")


class TracingTimeline(FakeTimeline):
    """The fake timeline, whose windows also carry a lock's events: after `novel` is
    enacted, n1 takes the lock and releases it twice (the second is a mismatch); other
    windows show no lock event."""

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        window = super().window(start_ns, end_ns, wait_s)
        if self.nemesis.enacted and self.nemesis.enacted[-1] == "novel" and self.nemesis.active:
            trace = (("n1", ACQUIRED), ("n1", RELEASED), ("n1", RELEASED))
        else:
            trace = ()
        return Window(window.summary, window.events, window.complete, trace=trace)


def model_campaign(tmp_path, lock_file, create: bool = True) -> Campaign:
    clock, nemesis = FakeClock(), FakeNemesis()
    directory = CampaignDir(tmp_path / "campaign")
    if create:
        directory.create(CampaignConfig(sut="fake", policy="random", reward="model", model=str(lock_file), seed=2))
    saved = directory.load_learner()
    learner = Learner.from_checkpoint(saved) if saved else Learner.create(policy="random", reward="model", seed=2)
    feed = bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"])
    return Campaign(directory, learner, TracingTimeline(clock, nemesis), nemesis,
                    LoopConfig(steps=6, window_s=2.5, reset_s=1.0, seed=2), sleeper=clock, model=feed)


def test_the_loop_replays_windows_through_the_model_and_reports_its_coverage(tmp_path, lock_file):
    campaign = model_campaign(tmp_path, lock_file)
    campaign.run(schedules=3)
    steps = [s for r in campaign.dir.read_schedules() for s in r["steps"]]
    novel = [s for s in steps if s["action"] == "novel"]
    assert novel, "the random policy tried the novel fault in 18 steps"
    assert all(s["model_mismatches"] == ["lock-released"] for s in novel)
    stats = campaign.dir.read_stats()
    assert stats["model_states"] == str(len(campaign.learner.learner.model_coverage.states))
    assert stats["model_mismatches"] == str(len(novel))
    assert campaign.learner.learner.model_coverage.mismatches == {"lock-released": len(novel)}
    plot = (campaign.dir.root / "plot_data").read_text().splitlines()
    assert plot[0].endswith(", model_states") and plot[-1].endswith(", " + stats["model_states"])
    assert campaign.learner.learner.model_coverage.states == {"'free'": len(steps) + 3, "'n1'": len(novel)}
    assert set(campaign.learner.learner.model_coverage.transitions) == {"'free' -acquire-> 'n1'", "'n1' -release-> 'free'"}


def test_each_schedule_starts_the_model_and_its_trace_anew(tmp_path, lock_file):
    """The trace of a schedule's first window must not reach back into the last schedule's
    heal and reset: they restart nodes with no fault event the new execution knows."""
    campaign = model_campaign(tmp_path, lock_file)
    campaign.run(schedules=3)
    assert campaign.source.trace_restarts == 3


def test_a_trace_the_mediator_cut_starts_the_models_execution_over(tmp_path, lock_file):
    """A trace whose beginning the mediator dropped (Window.trace_cut) lost events: the
    execution starts over with it instead of going on from a state the lost events left."""
    campaign = model_campaign(tmp_path, lock_file)
    restarts = []
    restart = campaign.model.restart
    campaign.model.restart = lambda: (restarts.append(campaign.source.calls), restart())

    class Cutting(TracingTimeline):
        def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
            window = super().window(start_ns, end_ns, wait_s)
            return replace(window, trace_cut=True) if self.calls == 4 else window

    campaign.source = Cutting(campaign.source.clock, campaign.nemesis)
    campaign.run(schedules=1)
    assert restarts == [0, 4], "at the schedule's start, and for the cut trace of its 4th window"


def test_model_coverage_survives_resume(tmp_path, lock_file):
    first = model_campaign(tmp_path, lock_file)
    first.run(schedules=2)
    coverage = first.learner.learner.model_coverage
    resumed = model_campaign(tmp_path, lock_file, create=False)
    assert resumed.learner.learner.model_coverage == coverage
    assert (resumed.progress.model_states, resumed.progress.model_mismatches) == (
        len(coverage.states), coverage.mismatch_count())


def test_without_a_model_nothing_about_models_is_written(tmp_path):
    clock, nemesis = FakeClock(), FakeNemesis()
    directory = CampaignDir(tmp_path / "plain")
    directory.create(CampaignConfig(sut="fake", seed=1))
    campaign = Campaign(directory, Learner.create(seed=1), FakeTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=3, seed=1), sleeper=clock)
    campaign.run(schedules=1)
    assert "model_states" not in campaign.dir.read_stats()
    assert not any("model_states" in s for s in campaign.dir.read_schedules()[0]["steps"])



def test_the_report_shows_model_coverage_and_mismatches_by_event(tmp_path, lock_file):
    campaign = model_campaign(tmp_path, lock_file)
    campaign.run(schedules=2)
    data = load_campaign(campaign.dir.root)
    rows = dict(model_rows(data))
    stats = campaign.dir.read_stats()
    assert rows["model states (transitions)"] == f"{stats['model_states']} ({stats['model_transitions']})"
    mismatches = int(stats["model_mismatches"])
    assert rows["model mismatches"] == (f"{mismatches}: lock-released {mismatches}" if mismatches else "0")
    assert "protocol model" in dict(summary_rows(data))
