"""The round-fault and Poisson-crash families (nemesis/faults/rounds.py, crashes.py) against
named fakes of the firewall and the adapter: a window's rounds are enacted in order and
lifted at its end, links other faults hold are kept, recovery carries over from one step to
the next, a reset stops everything; and a sampler policy drives a campaign with only the
faults the SUT can take. Rounds here are 40 ms long, so each test takes well under a second."""

from __future__ import annotations

import random
import threading
import time

import pytest

from mallory.campaign.config import CampaignConfig, LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.live import check_sampler_fault
from mallory.campaign.loop import Campaign
from mallory.errors import MalloryError
from mallory.learner.learner import Learner
from mallory.mediator.windows import Window
from nemesis.faults.base import FaultContext
from nemesis.faults.crashes import PoissonCrashFaults
from nemesis.faults.partition import PartitionFaults
from nemesis.faults.rounds import RoundFaults, tiling
from nemesis.nemesis import Nemesis
from tests.unit.campaign.test_loop import FakeClock
from tests.unit.nemesis.test_nemesis import (
    FakeBackend,
    FakeFirewall,
    FakeMembershipAdapter,
)

ROUND_S = 0.04
WINDOW_S = 0.2  # five rounds


class RecordingFirewall(FakeFirewall):
    """FakeFirewall that also logs, in order, the set of links dropped after every change."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.dropped_after: list[frozenset[str]] = []

    def _log(self) -> None:
        self.dropped_after.append(frozenset(f"{s}->{d}" for (s, d), r in self.rule.items() if r["drop"]))

    def drop(self, links):
        with self.lock:
            answer = super().drop(links)
            self._log()
            return answer

    def heal(self, links=None):
        with self.lock:
            answer = super().heal(links)
            self._log()
            return answer

    def dropped(self) -> set[str]:
        return {f"{s}->{d}" for (s, d), r in self.rule.items() if r["drop"]}


def round_nemesis(enabled, firewall=None, d=1, k=0, families=()):
    firewall = firewall or RecordingFirewall()
    ctx = FaultContext(FakeBackend(), FakeMembershipAdapter(), mediator=firewall)
    rounds = RoundFaults(WINDOW_S, d=d, k=k, drop_p=0.5, round_s=ROUND_S)
    return Nemesis(ctx, enabled=enabled, families=[rounds, *families]), firewall, rounds


def wait_done(family, report, timeout=2.0):
    thread = family._threads.get(id(report))
    if thread is not None:
        thread.join(timeout)
        assert not thread.is_alive()


def test_rounds_tile_the_window():
    assert tiling(2.5, 0.3) == (8, 2.5 / 8)
    assert tiling(2.5, 0.5) == (5, 0.5)
    assert tiling(0.2, 0.5) == (1, 0.2)  # a window shorter than a round is one round


@pytest.mark.parametrize("spec", ["lossy-sync", "isolate", "random-drop"])
def test_a_window_of_rounds_is_enacted_in_order_and_lifted_at_its_end(spec):
    nemesis, firewall, family = round_nemesis([f"rounds:{spec}"])
    report = nemesis.enact(f"rounds:{spec}", random.Random(7))
    planned = [frozenset(r["links"]) for r in report.params["rounds"]]
    assert len(planned) == 5 and report.params["round_s"] == pytest.approx(ROUND_S)
    assert report.verified and firewall.dropped() == planned[0] and set(report.links) == planned[0]
    wait_done(family, report)
    assert firewall.dropped() == set() and report.links == []
    applied = report.evidence["applied"]
    assert [line["round"] for line in applied] == [0, 1, 2, 3, 4, 5]  # 5: the lift at the window's end
    assert [frozenset(line["links"]) for line in applied] == [*planned, frozenset()]
    assert all(line["answered"] for line in applied)
    assert [line["at_s"] for line in applied] == sorted(line["at_s"] for line in applied)
    assert applied[-1]["at_s"] >= WINDOW_S - 0.01
    # the firewall went through the planned sets (a change may take two calls: drop, then lift)
    states = [s for i, s in enumerate(firewall.dropped_after) if i == 0 or s != firewall.dropped_after[i - 1]]
    wanted = [s for i, s in enumerate([*planned, frozenset()]) if i == 0 or s != planned[i - 1]]
    assert all(state in states for state in wanted)
    nemesis.heal(report)
    assert report.heal_evidence["rounds_enacted"] == 5 and report.heal_evidence["unanswered"] == []
    if spec == "random-drop":
        assert report.params["p"] == 0.5 and report.nodes == []
    else:
        assert report.params["d"] == 1 and all(len(r["faulty"]) <= 1 for r in report.params["rounds"])


def test_links_a_partition_holds_stay_dropped_through_the_rounds_and_after():
    nemesis, firewall, family = round_nemesis(["rounds:isolate", "partition:one"], d=2, families=[PartitionFaults()])
    partition = nemesis.enact("partition:one", random.Random(1))
    held = set(partition.links)
    rounds = nemesis.enact("rounds:isolate", random.Random(5))
    assert any(set(r["links"]) & held for r in rounds.params["rounds"]), "some round touches the partition's links"
    wait_done(family, rounds)
    assert all(held <= state for state in firewall.dropped_after[1:])  # never lifted meanwhile
    assert firewall.dropped() == held
    nemesis.heal(partition)
    assert firewall.dropped() == set()


def test_a_new_round_fault_ends_the_one_before_and_carries_its_recovery_on():
    nemesis, firewall, family = round_nemesis(["rounds:isolate"], d=1, k=50)
    first = nemesis.enact("rounds:isolate", random.Random(2))
    faulty_before = {n for r in first.params["rounds"] for n in r["faulty"]}
    assert faulty_before, "seed 2 isolates someone"
    second = nemesis.enact("rounds:isolate", random.Random(3))  # before the first's window is over
    assert first.links == [] and not family._threads.get(id(first))
    assert second.params["recovering"] == first.params["recovery_after"]
    assert set(second.params["recovering"]) == faulty_before
    assert not faulty_before & {n for r in second.params["rounds"] for n in r["faulty"]}
    reset = nemesis.reset()  # stops the second mid-window: nothing of it is left
    assert reset.healthy and firewall.dropped() == set() and family._threads == {}


def test_round_faults_are_refused_without_a_mediator_or_with_more_faulty_processes_than_nodes():
    ctx = FaultContext(FakeBackend(), FakeMembershipAdapter())
    nemesis = Nemesis(ctx, enabled=["rounds", "crash"], families=[RoundFaults(WINDOW_S), PoissonCrashFaults(WINDOW_S)])
    assert nemesis.actions() == ["crash:poisson", "noop"]
    assert nemesis.refused["rounds:lossy-sync"] == "no mediator to drop packets with"
    with pytest.raises(MalloryError, match="rounds:lossy-sync refused: d = 4 faulty processes per round is more than the 3"):
        Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter(), mediator=FakeFirewall()),
                enabled=["rounds:lossy-sync"], families=[RoundFaults(WINDOW_S, d=4)])


def test_the_default_catalogue_leaves_the_sampler_families_out():
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter(), mediator=FakeFirewall()))
    assert not [a for a in nemesis.actions() if a.startswith(("rounds:", "crash:"))]
    assert not [a for a in nemesis.refused if a.startswith(("rounds:", "crash:"))]


class CrashingAdapter(FakeMembershipAdapter):
    """Nodes that die when killed and run again when started; logs both, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.down: set[str] = set()

    def is_running(self, node: str) -> bool:
        return node not in self.down

    def kill(self, node: str) -> None:
        self.calls.append(("kill", node))
        self.down.add(node)

    def start(self, node: str) -> None:
        self.calls.append(("start", node))
        self.down.discard(node)


def test_poisson_crashes_kill_and_start_as_drawn_and_leave_every_node_running():
    adapter = CrashingAdapter()
    family = PoissonCrashFaults(window_s=0.3, rate=30.0, downtime_s=0.02)
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["crash:poisson"], families=[family])
    report = nemesis.enact("crash:poisson", random.Random(4))
    crashes = report.params["crashes"]
    assert len(crashes) >= 3 and report.verified
    wait_done(family, report)
    moments = sorted([(c["at_s"], 0, "kill", c["node"]) for c in crashes]
                     + [(c["back_s"], 1, "start", c["node"]) for c in crashes])
    assert adapter.calls == [(what, node) for _, _, what, node in moments]
    assert adapter.down == set()
    nemesis.heal(report)
    assert report.heal_evidence == {"killed": len(crashes), "planned": len(crashes), "errors": []}


def test_a_healed_crash_schedule_starts_the_nodes_it_killed_at_once():
    adapter = CrashingAdapter()
    family = PoissonCrashFaults(window_s=5.0, rate=50.0, downtime_s=4.0)  # a node stays down for long
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["crash:poisson"], families=[family])
    report = nemesis.enact("crash:poisson", random.Random(1))
    deadline = time.monotonic() + 2.0
    while not adapter.down and time.monotonic() < deadline:
        time.sleep(0.005)
    assert adapter.down, "a node is down"
    started = time.monotonic()
    nemesis.heal(report)
    assert time.monotonic() - started < 1.0 and adapter.down == set()
    assert report.healed and nemesis.active == []


def test_a_crash_schedule_needs_a_killable_adapter():
    class Unkillable:
        name = "unkillable"

    nemesis = Nemesis(FaultContext(FakeBackend(), Unkillable()), enabled=["crash"], families=[PoissonCrashFaults()])
    assert nemesis.refused == {"crash:poisson": "unkillable cannot kill a node"}


# -- a sampler policy drives the campaign ------------------------------------------------------------------


class SteadyWindows:
    """A window source whose every window is complete and alike."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def now_ns(self) -> int:
        return self.clock.ns

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        return Window(frozenset({"steady"}), 1, True)


def test_the_rounds_policy_takes_a_round_fault_every_step_and_only_faults_the_sut_can_take(tmp_path):
    nemesis, firewall, family = round_nemesis(["rounds", "partition"], families=[PartitionFaults()])
    config = CampaignConfig(sut="fake", policy="rounds", faults=("rounds", "partition"))
    check_sampler_fault(config, nemesis)  # offered: nothing to say
    directory = CampaignDir(tmp_path / "c")
    directory.create(config)
    clock = FakeClock()
    campaign = Campaign(directory, Learner.create(policy="rounds", seed=1), SteadyWindows(clock), nemesis,
                        LoopConfig(steps=4, window_s=WINDOW_S, reset_s=0.0, seed=1), sleeper=clock)
    campaign.run(schedules=2)
    steps = [s for record in directory.read_schedules() for s in record["steps"]]
    assert [s["action"] for s in steps] == ["rounds:lossy-sync"] * 8
    assert all(s["refused"] is None and len(s["report"]["params"]["rounds"]) == 5 for s in steps)
    assert firewall.dropped() == set() and family._threads == {}

    refusing = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), enabled=["rounds", "crash"],
                       families=[RoundFaults(WINDOW_S), PoissonCrashFaults(WINDOW_S)])
    with pytest.raises(MalloryError, match="^--policy rounds takes rounds:lossy-sync, which fake cannot: "
                                           "no mediator to drop packets with$"):
        check_sampler_fault(CampaignConfig(sut="fake", policy="rounds", faults=("rounds", "crash")), refusing)
    check_sampler_fault(CampaignConfig(sut="fake", policy="poisson-crash", faults=("rounds", "crash")), refusing)
