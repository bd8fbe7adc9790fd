"""bench/bench_kill_trials.py's arithmetic, on hand-made samples, probes, schedules and
journals, against numbers worked out by hand. Nothing here starts a campaign."""

from __future__ import annotations

import os

from tests.unit.bench.bench_module import load_bench

bench = load_bench("bench_kill_trials")
MS = 1_000_000


def test_the_link_is_faulted_by_a_drop_or_a_delay_rule_on_it_only():
    status = {"firewall": {"rules": [{"src": "n2", "dst": "n1", "drop": True, "delay_ms": 0.0},
                                     {"src": "n1", "dst": "n2", "drop": False, "delay_ms": 0.0, "copies": 2}]}}
    assert bench.link_state(status, ("n1", "n2")) == bench.CLEAR  # duplicates lose nothing
    status["firewall"]["rules"][1]["delay_ms"] = 40.0
    assert bench.link_state(status, ("n1", "n2")) == bench.FAULTED
    assert bench.link_state(status, ("n2", "n1")) == bench.FAULTED
    assert bench.link_state({}, ("n1", "n2")) == bench.CLEAR


def samples(*states: str, every_ms: int = 100) -> list[tuple[int, str]]:
    return [(i * every_ms * MS, state) for i, state in enumerate(states)]


def test_a_packet_met_no_fault_only_when_every_poll_around_it_saw_the_link_clear():
    polls = samples("clear", "clear", "faulted", "clear", "clear", "clear", "clear", "clear")
    margin = 300 * MS
    assert bench.unasked(polls, 650 * MS, margin)  # the polls from 400 to 700 ms: clear
    assert not bench.unasked(polls, 450 * MS, margin)  # the 200 ms poll saw a rule
    assert not bench.unasked(polls, -10 * MS, margin)  # before the first poll: unknown
    assert not bench.unasked(polls, 800 * MS, margin)  # no poll after it
    gap = [(0, "clear"), (900 * MS, "clear")]
    assert not bench.unasked(gap, 450 * MS, margin)  # polls 900 ms apart: unknown
    assert not bench.unasked(samples("clear", "unknown", "clear"), 100 * MS, margin)


def test_blackholed_seconds_count_lost_probes_sent_while_nothing_was_asked():
    polls = samples(*(["clear"] * 10 + ["faulted"] * 10 + ["clear"] * 10))  # a rule from 1.0 to 2.0 s
    sent = {seq: seq * 10 * MS for seq in range(300)}  # a probe every 10 ms for 3 s
    lost = set(range(40, 45)) | set(range(120, 160)) | {250}  # 5 + 1 unasked, 40 under the rule
    received = [seq for seq in sent if seq not in lost]
    seconds, longest = bench.blackholed(sent, received, polls, (0, 3000 * MS))
    assert (round(seconds, 3), round(longest, 3)) == (0.06, 0.05)
    seconds, _ = bench.blackholed(sent, received, polls, (600 * MS, 3000 * MS))  # the span leaves 40..44 out
    assert round(seconds, 3) == 0.01


def test_lost_work_is_the_steps_no_recorded_schedule_holds():
    recorded = [{"steps": [{}, {}, {}]}, {"steps": [{}, {}, {}]}]
    assert bench.lost_work(8, recorded, 3) == (2, 1)  # two steps of the schedule in flight
    assert bench.lost_work(6, recorded, 3) == (0, 0)  # killed between schedules
    assert bench.lost_work(12, recorded, 3) == (6, 2)  # more than the one in flight: a loss to report
    assert bench.lost_work(0, [], 3) == (0, 0)


def test_gap_findings_are_those_of_schedules_with_an_unobserved_gap():
    schedules = [{"findings": ["a"]}, {"findings": [], "unobserved": [{"at": 1}], "unobserved_findings": ["b"]},
                 {"findings": ["c"], "unobserved": [{"at": "reset"}]}]
    bundled = [{"index": 0}, {"index": 2, "unobserved": [{"at": "reset"}]}]
    assert bench.gap_findings(schedules, bundled) == 2  # c's record, and the bundle made from it
    assert bench.gap_findings(schedules[:2], bundled[:1]) == 0


def test_detection_is_the_start_of_the_observer_that_replaced_the_victim():
    ticks = os.sysconf("SC_CLK_TCK")
    entries = [
        {"proc": 10, "start": 100 * ticks, "node": "n1", "name": "observer"},
        {"proc": 11, "start": 100 * ticks, "node": "n2", "name": "observer"},
        {"proc": 12, "start": 101 * ticks, "node": "n2", "name": "sut"},
        {"proc": 20, "start": 203 * ticks, "node": "n2", "name": "observer"},
    ]
    assert bench.detection_s(entries, 11, 200.5) == 2.5
    assert bench.detection_s(entries, 10, 200.5) is None  # n1's observer was never replaced
    assert bench.detection_s(entries, 99, 200.5) is None


def trial(victim: str, **fields) -> object:
    t = bench.Trial(0, victim, 1, started=True)
    for name, value in fields.items():
        setattr(t, name, value)
    return t


def test_the_summary_meets_its_targets_only_with_no_leak_no_blackhole_and_at_most_one_schedule_lost():
    good = [trial("fuzz", schedules_lost=1, steps_lost=2, resumed=True), trial("mediator", resumed=True),
            trial("observer", detection_s=1.6), trial("observer+sut", detection_s=2.1)]
    table, ok = bench.summarize(good)
    assert ok and "kill trials run        : 4 (0 did not start)" in table
    assert "schedules lost/resume  : at most 1 (target <= 1)" in table
    leaky = trial("fuzz", resumed=True)
    leaky.leaks["paused"] = 1
    for bad in (leaky, trial("mediator", blackholed_s=0.02), trial("fuzz", schedules_lost=2),
                trial("observer", gap_findings=1), trial("mediator", resumed=False), bench.Trial(0, "fuzz", 1)):
        table, ok = bench.summarize([*good, bad])
        assert not ok, bad
    assert "paused 1" in bench.summarize([leaky])[0]
