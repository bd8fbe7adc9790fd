"""The campaign loop against named fakes: learning, lateness, findings, resume.

The fakes stand in for the mediator's timeline (FakeTimeline), the nemesis (FakeNemesis)
and the wall clock (FakeClock), so the loop's own logic is tested in milliseconds; the
live-cluster campaign test exercises the real ones.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import orjson
import pytest

from mallory.campaign.config import CampaignConfig, LoopConfig
from mallory.campaign.directory import PLOT_COLUMNS, CampaignDir
from mallory.campaign.loop import (
    HEAL,
    NOOP,
    BugEvidence,
    Campaign,
    ScriptedStep,
    schedule_seed,
)
from mallory.errors import MalloryError
from mallory.learner.learner import Learner
from mallory.mediator.windows import Window


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_700_000_000_000_000_000

    def sleep(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


class FakeNemesis:
    """Four faults; only `novel` leads the fake cluster somewhere new each time."""

    def __init__(self) -> None:
        self.enacted: list[str] = []
        self.healed = 0
        self.resets = 0
        self.active: list[str] = []
        self.refuse: str | None = None
        self.unhealable: str | None = None
        self.unhealthy_resets: set[int] = set()  # which resets (1-based) report a problem
        self.restarts = 0
        self.fresh_starts = 0
        self.window_only: set[str] = set()  # actions that last their step's window only

    def actions(self) -> list[str]:
        return ["novel", "dull-1", "dull-2", "dull-3"]

    def enact(self, action: str, rng: random.Random) -> dict:
        if action == self.refuse:
            raise MalloryError(f"{action} refused: its target is down")
        self.enacted.append(action)
        self.active.append(action)
        return {"action": action, "verified": True}

    def one_window(self, report: dict) -> bool:
        return report["action"] in self.window_only

    def heal(self, report: dict) -> None:
        self.healed += 1
        if report["action"] in self.active:  # an unhealable one is tried again by the loop
            self.active.remove(report["action"])
        if report["action"] == self.unhealable:
            raise MalloryError(f"healing {report['action']}: no quorum to add the member back")

    def heal_all(self, reports: list[dict]) -> list[str]:
        problems = []
        for report in reversed(reports):
            try:
                self.heal(report)
            except MalloryError as exc:
                problems.append(str(exc))
        return problems

    def reset(self) -> dict:
        self.resets += 1
        assert not self.active, "the loop heals every active fault before reset"
        return {"healthy": self.resets not in self.unhealthy_resets}

    def restart_all(self, *, fresh: bool = False) -> dict:
        self.restarts += 1
        self.fresh_starts += fresh
        return {"healthy": True, "restarted": ["n1", "n2", "n3"]}


class FakeTimeline:
    def __init__(self, clock: FakeClock, nemesis: FakeNemesis, late_every: int = 0) -> None:
        self.clock = clock
        self.nemesis = nemesis
        self.calls = 0
        self.late_every = late_every
        self.novel = 0
        self.trace_restarts = 0

    def now_ns(self) -> int:
        return self.clock.ns

    def restart_trace(self) -> None:
        self.trace_restarts += 1

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        self.calls += 1
        if self.late_every and self.calls % self.late_every == 0:
            return Window(frozenset({"partial"}), 1, complete=False)
        last = self.nemesis.enacted[-1] if self.nemesis.enacted else None
        if last == "novel" and self.nemesis.active:
            self.novel += 1
            return Window(frozenset(f"novel-{self.novel}-{i}" for i in range(30)), 30, True)
        return Window(frozenset(f"steady-{i}" for i in range(30)), 30, True)


def make_campaign(tmp_path, policy: str, seed: int = 3, late_every: int = 0, checker=None, create=True,
                  fresh_data=False):
    clock = FakeClock()
    nemesis = FakeNemesis()
    directory = CampaignDir(tmp_path / "campaign")
    if create:
        directory.create(CampaignConfig(sut="fake", policy=policy, seed=seed))
    saved = directory.load_learner()
    learner = Learner.from_checkpoint(saved) if saved else Learner.create(policy=policy, seed=seed)
    campaign = Campaign(
        directory,
        learner,
        FakeTimeline(clock, nemesis, late_every),
        nemesis,
        LoopConfig(steps=12, window_s=2.5, reset_s=5.0, seed=seed, fresh_data=fresh_data),
        checker=checker,
        sleeper=clock,
    )
    return campaign, nemesis


def novel_share(tmp_path, policy: str, seed: int) -> float:
    campaign, nemesis = make_campaign(tmp_path / f"{policy}-{seed}", policy, seed)
    campaign.run(schedules=25)
    chosen = [s["action"] for r in campaign.dir.read_schedules() for s in r["steps"]]
    return Counter(chosen)["novel"] / len(chosen)


def test_qlearning_prefers_the_action_that_finds_new_states(tmp_path):
    """One action reliably produces new states, the others never do: within 300 steps
    Q-learning chooses it clearly more often than the uniform (Jepsen) baseline does."""
    q = [novel_share(tmp_path, "qlearning", seed) for seed in (1, 2, 3)]
    r = [novel_share(tmp_path, "random", seed) for seed in (1, 2, 3)]
    mean_q, mean_r = sum(q) / 3, sum(r) / 3
    assert 0.1 < mean_r < 0.25, f"random picks 1 of 6 actions: {r}"
    assert mean_q > 1.5 * mean_r, f"qlearning {q} vs random {r}"


def test_campaign_directory_is_complete_and_well_formed(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "qlearning")
    campaign.run(schedules=2)
    root = campaign.dir.root
    schedules = campaign.dir.read_schedules()
    assert [s["index"] for s in schedules] == [0, 1]
    assert [s["seed"] for s in schedules] == [schedule_seed(3, 0), schedule_seed(3, 1)]
    for s in schedules:
        assert len(s["steps"]) == 12 and s["reset"] == {"healthy": True}
        assert all(step["action"] in {"novel", "dull-1", "dull-2", "dull-3", HEAL, NOOP} for step in s["steps"])
        t = [step["window_ns"] for step in s["steps"]]
        assert all(t1 - t0 >= 2_500_000_000 for t0, t1 in t) and all(a[1] <= b[0] for a, b in zip(t, t[1:]))
    assert nemesis.resets == 2
    plot = (root / "plot_data").read_text().splitlines()
    assert plot[0] == "# " + ", ".join(PLOT_COLUMNS) and len(plot) == 1 + 24
    stats = campaign.dir.read_stats()
    assert stats["schedules_done"] == "2" and stats["steps_done"] == "24"
    assert int(stats["distinct_states"]) == len(campaign.learner.learner.store) >= 2
    assert orjson.loads((root / "campaign.json").read_bytes())["seed"] == 3
    assert Learner.from_checkpoint((root / "learner").read_bytes()).store.visit_counts == campaign.learner.learner.store.visit_counts


def test_late_feedback_is_recorded_late_and_teaches_nothing(tmp_path):
    campaign, _ = make_campaign(tmp_path, "qlearning", late_every=3)
    campaign.run(schedules=1)
    steps = campaign.dir.read_schedules()[0]["steps"]
    late = [s for s in steps if s["late"]]
    assert late and all(s["state"] is None and s["reward"] is None for s in late)
    assert all(s["state"] is not None for s in steps if not s["late"])
    assert campaign.dir.read_stats()["late_steps"] == str(len(late))
    # every state the learner knows came from a complete window: the partial ones added none
    record = campaign.dir.read_schedules()[0]
    known = {record["initial_state"]} | {s["state"] for s in steps if not s["late"]}
    assert len(campaign.learner.learner.store) == len(known)


def test_a_truncated_window_is_recorded_so_and_teaches_nothing(tmp_path):
    """The mediator dropped part of the window (its bounded buffer): late, and marked why."""
    campaign, nemesis = make_campaign(tmp_path, "qlearning")

    class Truncating(FakeTimeline):
        def window(self, start_ns, end_ns, wait_s):
            window = super().window(start_ns, end_ns, wait_s)
            return Window(frozenset({"part"}), 1, False, truncated=True) if self.calls == 3 else window

    campaign.source = Truncating(campaign.source.clock, nemesis)
    campaign.run(schedules=1)
    steps = campaign.dir.read_schedules()[0]["steps"]
    assert [s["step"] for s in steps if s.get("truncated")] == [1]  # call 1 is the schedule's first window
    assert steps[1]["late"] and steps[1]["state"] is None
    assert not any(s.get("truncated") for s in steps[2:])


class FakeChecker:
    """Flags the same bug whenever a schedule enacted `novel` at least twice."""

    def begin_schedule(self, index):
        pass

    def faults_healed(self):
        pass

    def check_schedule(self, index, record):
        if sum(s["action"] == "novel" for s in record["steps"]) >= 2:
            return [BugEvidence("log:two-leaders", {"explanation": "two leaders in term 3", "time": index},
                                sighting={"occurrences": index + 1})]
        return []


def test_a_bug_found_many_times_is_one_bundle(tmp_path):
    campaign, _ = make_campaign(tmp_path, "qlearning", checker=FakeChecker())
    campaign.run(schedules=4)
    flagged = [s for s in campaign.dir.read_schedules() if s["findings"]]
    assert len(flagged) >= 2
    bundle = campaign.dir.root / "bugs" / "log_two-leaders"
    assert campaign.dir.known_bugs() == {"log_two-leaders"}
    lines = [orjson.loads(line) for line in (bundle / "sightings.jsonl").read_bytes().splitlines()]
    assert [(line["schedule"], line["occurrences"]) for line in lines] == [(s["index"], s["index"] + 1) for s in flagged]
    assert orjson.loads((bundle / "report.json").read_bytes())["explanation"] == "two leaders in term 3"
    assert campaign.dir.read_stats()["bugs_found"] == "1"


def test_resume_continues_where_the_campaign_stopped(tmp_path):
    first, _ = make_campaign(tmp_path, "qlearning", checker=FakeChecker())
    first.run(schedules=3)
    states = len(first.learner.learner.store)
    # A later incarnation, as after a kill: everything comes from the directory.
    again, _ = make_campaign(tmp_path, "qlearning", checker=FakeChecker(), create=False)
    assert again.progress.schedules_done == 3 and len(again.learner.learner.store) == states
    again.run(schedules=2)
    assert [s["index"] for s in again.dir.read_schedules()] == [0, 1, 2, 3, 4]
    assert again.progress.steps_done == 60


def test_a_directory_holding_a_campaign_is_not_overwritten(tmp_path):
    directory = CampaignDir(tmp_path / "c")
    directory.create(CampaignConfig(sut="fake", seed=1))
    with pytest.raises(Exception, match="--resume"):
        directory.create(CampaignConfig(sut="fake", seed=2))


def test_a_deadline_cuts_the_schedule_between_steps(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "random")
    clock = campaign.sleeper
    start = clock.ns
    campaign.progress.elapsed_s = lambda: (clock.ns - start) / 1e9  # campaign time on the fake clock
    campaign.run(duration_s=10.0)
    (record,) = campaign.dir.read_schedules()
    assert len(record["steps"]) == 4, "2.5 s steps: the fourth ends at the 10 s deadline"
    assert nemesis.resets == 1 and not nemesis.active


def test_a_refused_fault_is_recorded_and_the_campaign_goes_on(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "random")
    nemesis.refuse = "dull-1"
    campaign.run(schedules=3)
    steps = [s for r in campaign.dir.read_schedules() for s in r["steps"]]
    refused = [s for s in steps if s["action"] == "dull-1"]
    assert refused and all("its target is down" in s["refused"] and s["report"] is None for s in refused)
    assert all(s["refused"] is None for s in steps if s["action"] != "dull-1")
    assert campaign.dir.read_stats()["refused_faults"] == str(len(refused))


class HealWatchingChecker:
    """Records, per schedule, how many resets the nemesis had done when every fault was
    said to be healed, and when the checks came."""

    def __init__(self, nemesis: FakeNemesis) -> None:
        self.nemesis = nemesis
        self.events: list[tuple[str, int]] = []

    def begin_schedule(self, index):
        pass

    def faults_healed(self):
        self.events.append(("healed", self.nemesis.resets))

    def check_schedule(self, index, record):
        self.events.append(("checked", self.nemesis.resets))
        return []


def test_the_checks_hear_when_every_fault_is_healed_after_the_heals_or_else_after_the_reset(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "random")
    checker = campaign.checker = HealWatchingChecker(nemesis)
    campaign.run(schedules=1)
    assert checker.events == [("healed", 0), ("checked", 1)]  # the final heals healed everything

    def stubborn(reports: list[dict]) -> list[str]:  # a heal that only the reset can finish
        nemesis.active.clear()
        return ["healing novel: no quorum to add the member back"]

    nemesis.heal_all = stubborn
    campaign.run(schedules=1)
    assert campaign.dir.read_schedules()[1]["heal_problems"]
    assert checker.events[2:] == [("healed", 2), ("checked", 2)]


def test_after_a_heal_step_failed_every_fault_is_healed_only_by_the_reset(tmp_path):
    """A heal step that could not heal (a node not added back) leaves its fault in force:
    the end of the schedule's heals is then no moment of a whole cluster, the reset is (a
    raft-kv campaign measured 'stuck' from it while two nodes were still dead)."""
    campaign, nemesis = make_campaign(tmp_path, "random")
    checker = campaign.checker = HealWatchingChecker(nemesis)
    nemesis.unhealable = "dull-1"
    campaign.run(schedules=6)
    records = campaign.dir.read_schedules()
    healed = [resets for event, resets in checker.events if event == "healed"]
    failed_at_a_step = [any(s.get("heal_problems") for s in r["steps"]) or bool(r.get("heal_problems"))
                        for r in records]
    assert any(failed_at_a_step) and not all(failed_at_a_step)  # both kinds of schedule, seed 3
    # after the reset of schedule i (i + 1 resets) when a heal failed, before it otherwise
    assert healed == [i + 1 if failed else i for i, failed in enumerate(failed_at_a_step)]


class StarvedChecker:
    """Says the workload of the given schedules got no op through."""

    def __init__(self, starved: set[int]) -> None:
        self.starved = starved

    def begin_schedule(self, index):
        pass

    def faults_healed(self):
        pass

    def check_schedule(self, index, record):
        record["checks"] = {"findings": 0, "served": 0 if index in self.starved else 25}
        return []


def test_a_wedged_cluster_is_restarted_before_the_next_schedule(tmp_path):
    """An unhealthy reset, or a schedule that served no client, restarts every node; a
    healthy schedule that served clients does not."""
    campaign, nemesis = make_campaign(tmp_path, "random", checker=StarvedChecker({2}))
    nemesis.unhealthy_resets = {1}
    campaign.run(schedules=4)
    records = campaign.dir.read_schedules()
    assert [("restart" in r) for r in records] == [True, False, True, False]
    assert nemesis.restarts == 2
    assert records[0]["restart"]["restarted"] == ["n1", "n2", "n3"]


def test_with_fresh_data_every_schedule_ends_with_a_fresh_start_after_its_checks(tmp_path):
    """One fresh start per schedule, after the checks (which read the nodes' data), and it
    stands in for the restart a wedged cluster would get."""
    class NotingChecker(StarvedChecker):
        """Notes how many fresh starts there were when each schedule was checked."""

        seen: list[int] = []

        def check_schedule(self, index, record):
            self.seen.append(nemesis.fresh_starts)
            return super().check_schedule(index, record)

    checker = NotingChecker({1})  # schedule 1 served no client: a restart it would get
    campaign, nemesis = make_campaign(tmp_path, "random", checker=checker, fresh_data=True)
    campaign.run(schedules=3)
    records = campaign.dir.read_schedules()
    assert checker.seen == [0, 1, 2]
    assert nemesis.fresh_starts == nemesis.restarts == 3
    assert all(r["fresh_start"]["restarted"] == ["n1", "n2", "n3"] for r in records)
    assert not any("restart" in r for r in records)


def test_a_heal_that_fails_is_recorded_and_the_campaign_goes_on(tmp_path):
    campaign, nemesis = make_campaign(tmp_path, "random")
    nemesis.unhealable = "dull-1"
    campaign.run(schedules=3)
    records = campaign.dir.read_schedules()
    assert len(records) == 3 and nemesis.resets == 3
    problems = [p for r in records for p in r.get("heal_problems", [])]
    problems += [p for r in records for s in r["steps"] for p in s.get("heal_problems", [])]
    assert any("no quorum" in p for p in problems) == ("dull-1" in nemesis.enacted)
    assert "dull-1" in nemesis.enacted  # the random policy over 36 steps takes it


class BehaviourTimeline(FakeTimeline):
    """FakeTimeline whose windows also show behaviour: `novel` steps show a pair and the
    type "FUNC:1a" never shown before, the others the same steady pair."""

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        window = super().window(start_ns, end_ns, wait_s)
        if not window.complete:
            return window
        if window.summary and next(iter(window.summary)).startswith("novel"):
            return Window(window.summary, window.events, True, None, frozenset({"FUNC:1a"}),
                          frozenset({f"FUNC:1a>FUNC:{self.novel:x}"}))
        return Window(window.summary, window.events, True, None, frozenset(), frozenset({"FUNC:0>FUNC:0"}))


def test_the_loop_counts_coverage_and_waypoints_in_steps_stats_and_plot(tmp_path):
    from mallory.campaign.waypoints import parse_waypoints
    from mallory.instrument.catalogue import Catalogue, CodeEvent

    catalogue = Catalogue([CodeEvent(0x1A, "s.c", 1, "f", "FUNC", "novel-event")])
    waypoints = parse_waypoints('[[waypoint]]\nname = "novelty"\nevents = ["novel-event"]\nfaults = ["novel"]\n',
                                "w.toml", catalogue, [], ["novel", "dull-1", "dull-2", "dull-3"])
    clock, nemesis = FakeClock(), FakeNemesis()
    directory = CampaignDir(tmp_path / "campaign")
    directory.create(CampaignConfig(sut="fake", seed=1))
    campaign = Campaign(directory, Learner.create(policy="random", seed=1), BehaviourTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=12, window_s=2.5, reset_s=5.0, seed=1), sleeper=clock, waypoints=waypoints)
    campaign.run(schedules=3)
    steps = [s for r in directory.read_schedules() for s in r["steps"]]
    novel = [s for s in steps if s["action"] == "novel"]
    assert novel, "random chose `novel` at least once in 36 steps"
    assert all(s["waypoint"] == 1 and s["new_pairs"] == 1 for s in novel)
    # every window that showed the novel event under a `novel` fault is at the waypoint, and
    # added a pair; the steady pair was new once
    novel_windows = [s for s in steps if s["waypoint"] == 1]
    assert all(s["new_pairs"] == 1 for s in novel_windows) and len(novel_windows) >= len(novel)
    assert campaign.progress.pairs_covered == 1 + len(novel_windows) == len(campaign.learner.learner.coverage)
    reached = [r.get("waypoint") for r in directory.read_schedules()]
    assert campaign.progress.waypoints_reached == {"novelty": reached.count("novelty")} and "novelty" in reached
    stats = directory.read_stats()
    assert stats["pairs_covered"] == str(1 + len(novel_windows))
    assert stats["waypoints_reached"] == f"novelty:{reached.count('novelty')}"
    from mallory.report.campaign_data import parse_plot_data

    plot = parse_plot_data((directory.root / "plot_data").read_text())
    assert [r.pairs_covered for r in plot][-1] == 1 + len(novel_windows)
    assert [r.waypoint for r in plot] == [s["waypoint"] for s in steps]
    # a resumed campaign counts on from its checkpoint and schedules
    resumed = Campaign(directory, Learner.from_checkpoint(directory.load_learner()), BehaviourTimeline(clock, nemesis),
                       nemesis, LoopConfig(seed=1), sleeper=clock, waypoints=waypoints)
    assert resumed.progress.pairs_covered == campaign.progress.pairs_covered
    assert resumed.progress.waypoints_reached == campaign.progress.waypoints_reached


def test_the_faults_context_sees_the_families_in_force_and_a_heal_empties_them(tmp_path):
    clock, nemesis = FakeClock(), FakeNemesis()
    directory = CampaignDir(tmp_path / "campaign")
    directory.create(CampaignConfig(sut="fake", seed=2, context="faults"))
    learner = Learner.create(policy="random", seed=2, context="faults")
    campaign = Campaign(directory, learner, FakeTimeline(clock, nemesis), nemesis,
                        LoopConfig(steps=12, window_s=2.5, reset_s=5.0, seed=2), sleeper=clock)
    campaign.run(schedules=3)
    expected = {()}
    for record in directory.read_schedules():
        active: list[str] = []
        for step in record["steps"]:
            if step["action"] == HEAL:
                active = []
            elif step["action"] != NOOP and step["refused"] is None:
                active.append(step["action"])
            expected.add(tuple(sorted(active)))
    assert set(learner.configurations) == expected


def test_a_fault_that_lasts_one_window_is_judged_with_it_in_force_then_healed(tmp_path):
    """A filter set lasts its step's window: the window is observed with it in force (the
    faults context names its family), then it is healed before the next step, so it never
    accumulates; a heal that fails leaves it for the schedule's heal."""
    clock, nemesis = FakeClock(), FakeNemesis()
    nemesis.window_only = {"novel"}
    directory = CampaignDir(tmp_path / "campaign")
    directory.create(CampaignConfig(sut="fake", seed=2, context="faults"))
    learner = Learner.create(policy="random", seed=2, context="faults")
    timeline = FakeTimeline(clock, nemesis)
    campaign = Campaign(directory, learner, timeline, nemesis,
                        LoopConfig(steps=12, window_s=2.5, reset_s=5.0, seed=2), sleeper=clock)
    record = campaign.run_schedule(0, script=[ScriptedStep("novel", 0), ScriptedStep("dull-1", 1),
                                               ScriptedStep("novel", 2), ScriptedStep(NOOP, 3)])
    steps = record["steps"]
    assert [s["new"] for s in steps[:1]] == [True]  # its window was judged with it active
    assert [s.get("healed_after_window") for s in steps] == [True, None, True, None]
    assert nemesis.healed == 2 + 1  # each novel after its window, dull-1 at the schedule's end
    assert ("novel",) in learner.configurations and ("dull-1", "novel") in learner.configurations
    assert ("novel", "novel") not in learner.configurations

    nemesis.unhealable = "novel"
    record = campaign.run_schedule(1, script=[ScriptedStep("novel", 0), ScriptedStep(NOOP, 1)])
    first = record["steps"][0]
    assert first["healed_after_window"] is False and "no quorum" in first["heal_problems"][0]
    assert record["heal_problems"]  # still active: the schedule's heal met it again


def test_fuzzer_stats_and_plot_data_speak_afl(tmp_path):
    """AFL++'s keys and columns first, each a number where AFL has one (afl-plot hands the
    columns to gnuplot by position; afl-whatsup does shell arithmetic on the keys);
    tests/live/afl runs the tools themselves."""
    from mallory.campaign.afl import AFL_PLOT_COLUMNS

    campaign, _ = make_campaign(tmp_path, "random", checker=FakeChecker())
    campaign.run(schedules=4)
    stats = campaign.dir.read_stats()
    assert list(stats)[:4] == ["start_time", "last_update", "run_time", "fuzzer_pid"]
    assert stats["fuzzer_pid"] == str(os.getpid()) and stats["execs_done"] == "4"
    assert stats["corpus_count"] == stats["distinct_states"] and stats["saved_crashes"] == stats["bugs_found"]
    for key in ("start_time", "last_update", "run_time", "execs_done", "corpus_count", "cur_item", "pending_favs",
                "pending_total", "saved_crashes", "last_find", "last_crash", "last_hang", "exec_timeout", "cycles_done"):
        assert stats[key].isdigit(), (key, stats[key])
    lines = (campaign.dir.root / "plot_data").read_text().splitlines()
    assert lines[0].startswith("# " + ", ".join(AFL_PLOT_COLUMNS) + ", ")
    for line in lines[1:]:
        [float(value) for value in line.split(", ")[: len(AFL_PLOT_COLUMNS)]]


def test_fuzzer_stats_values_are_safe_for_afl_whatsup(tmp_path):
    """afl-whatsup sources fuzzer_stats' lines as key="value": no value may end the quotes
    or make the shell run or expand anything."""
    directory = CampaignDir(tmp_path)
    directory.write_stats({"afl_banner": 'a "b" $(rm -rf x) `id` \\ c\nd'})
    (line,) = (tmp_path / "fuzzer_stats").read_text().splitlines()
    assert not set(line.partition(": ")[2]) & set('"$`\\')
