"""bench/bench_kill_trials.py's arithmetic, on hand-made samples, probes, schedules and
journals, against numbers worked out by hand. Nothing here starts a campaign."""

from __future__ import annotations

import os
import signal
import subprocess
import time

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


def test_blackholed_probes_are_those_lost_while_nothing_was_asked():
    polls = samples(*(["clear"] * 10 + ["faulted"] * 10 + ["clear"] * 10))  # a rule from 1.0 to 2.0 s
    sent = {seq: seq * 10 * MS for seq in range(300)}  # a probe every 10 ms for 3 s
    lost = set(range(40, 45)) | set(range(120, 160)) | {250}  # 5 + 1 unasked, 40 under the rule
    received = [seq for seq in sent if seq not in lost]
    losses = bench.probe_losses(sent, received, polls, (0, 3000 * MS))
    assert (losses.blackholed, losses.in_flight) == ([40, 41, 42, 43, 44, 250], [])
    assert losses.longest_blackhole() == 5
    losses = bench.probe_losses(sent, received, polls, (600 * MS, 3000 * MS))  # the span leaves 40..44 out
    assert losses.blackholed == [250]


def kill_at(kill_ms: int, exited_ms: int | None) -> tuple[int, int]:
    return bench.in_flight_window(kill_ms * MS, None if exited_ms is None else exited_ms * MS, 200 * MS)


def test_the_in_flight_window_runs_from_before_the_kill_to_the_readers_exit():
    assert kill_at(1000, 1004) == (800 * MS, 1004 * MS)
    assert kill_at(1000, None) == (800 * MS, 1000 * MS)  # exit not seen: nothing after the kill is in flight


def test_a_kill_splits_the_unasked_losses_into_in_flight_and_blackholed():
    polls = samples(*(["clear"] * 6 + ["faulted"] * 3 + ["clear"] * 22))  # a rule from 0.6 to 0.8 s
    sent = {seq: seq * 10 * MS for seq in range(300)}  # seq N sent at N * 10 ms
    lost = {20, 65, 70, 129, 130, 149, 150, 151, 161, 162, 250}
    received = [seq for seq in sent if seq not in lost]
    # killed at 1500 ms, its exit seen at 1504: in flight, what was sent from 1300 to 1504 ms
    losses = bench.probe_losses(sent, received, polls, (0, 3000 * MS), kill_at(1500, 1504))
    assert losses.in_flight == [130, 149, 150]
    # 65 and 70 fell under the rule: neither; 20 and 129 were lost before the window (long
    # before, and just before), 151 onwards after the reader was gone: all blackholed
    assert losses.blackholed == [20, 129, 151, 161, 162, 250]
    assert losses.longest_blackhole() == 2
    losses = bench.probe_losses(sent, received, polls, (0, 3000 * MS), kill_at(1500, 1610))  # a slow exit
    assert losses.in_flight == [130, 149, 150, 151, 161]
    assert losses.blackholed == [20, 129, 162, 250]


def test_without_a_killed_reader_every_unasked_loss_is_blackholed():
    polls = samples(*(["clear"] * 30))
    sent = {seq: seq * 10 * MS for seq in range(300)}
    received = [seq for seq in sent if seq not in (149, 150)]
    losses = bench.probe_losses(sent, received, polls, (0, 3000 * MS), None)
    assert (losses.blackholed, losses.in_flight, losses.longest_blackhole()) == ([149, 150], [], 2)


def test_the_transit_near_a_kill_is_the_slowest_unasked_probe_sent_within_a_second_of_it():
    polls = samples(*(["clear"] * 20 + ["faulted"] * 5 + ["clear"] * 20))  # a rule from 2.0 to 2.5 s
    sent = {seq: seq * 10 * MS for seq in range(450)}
    received_at = {seq: t + 2 * MS for seq, t in sent.items()}
    received_at[120] += 30 * MS  # 1.2 s, within a second of the kill at 1.5 s: 32 ms
    received_at[10] += 90 * MS  # 0.1 s: too early to count
    received_at[230] += 400 * MS  # held by the rule, as asked
    del received_at[150]
    assert bench.transit_near(sent, received_at, polls, 1500 * MS) == 32.0
    assert bench.transit_near(sent, {}, polls, 1500 * MS) is None


def test_kill_all_sees_the_reader_exit_after_the_kill():
    child = subprocess.Popen(["sleep", "30"])
    try:
        before = time.time_ns()
        kill_ns, exited_ns = bench.kill_all([child.pid], child.pid)
        assert before <= kill_ns <= exited_ns <= time.time_ns()
        assert child.wait(5) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    kill_ns, exited_ns = bench.kill_all([child.pid], None)  # reaped and gone: nothing to wait for
    assert exited_ns is None


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


def test_probes_lost_in_flight_at_a_kill_are_reported_apart_and_fail_nothing():
    flushed = [trial("mediator", resumed=True, in_flight_probes=2, in_flight_s=0.02, reader_exit_ms=3.5,
                     transit_near_kill_ms=12.0),
               trial("observer", in_flight_probes=1, in_flight_s=0.01, reader_exit_ms=1.2, transit_near_kill_ms=4.0)]
    table, ok = bench.summarize(flushed)
    assert ok
    assert "blackholed seconds     : 0.0 (target 0)" in table
    assert "lost in flight at kill : 3 probes, 0.03 s" in table
    assert "seen at most 3.5 ms after it); longest unasked transit near a kill 12.0 ms" in table
    header, mediator, observer = table.splitlines()[:3]
    column = header.index("in flight s") + len("in flight s")  # right-aligned under its header
    assert mediator[:column].split()[-2:] == ["2", "0.02"] and observer[:column].split()[-2:] == ["1", "0.01"]
    assert "seen at most - ms" in bench.summarize([trial("fuzz", resumed=True)])[0]
